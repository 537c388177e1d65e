/**
 * The nemesis run: a store deployment (deployments/, one file per store mode: its apps'
 * environment, its faults, its reader), three app instances (test/nemesis/app.ts), each behind
 * a TCP proxy of the run's own to the store where the apps reach it through one, clients that
 * retry as real clients do (traffic.ts), and a schedule of faults made from the seed
 * (schedule.ts), applied by the nemesis (nemesis.ts); the apps' `/resumes` charges a payment
 * service (examples/payments-app.ts, an idemkit service of its own in a fourth process, on its
 * in-memory store), which every instance reaches through one more TCP proxy: a third of the
 * faults are aimed at it (its proxy's latency, dropped answers, half-open connections; its
 * process paused). Every request and answer goes to the
 * history; after a quiet phase each key is probed once more, the store's records and rows are
 * read (store-state.ts), then the checker (checker.ts) holds the history against the execution
 * log and the database's rows. This file runs those steps in order and writes the run folder.
 *
 *   npm run test:nemesis -- --seed 7 --duration 60s --store redis --framework fastify
 *   npm run test:nemesis -- --seeds 1,2 --store redis,postgres --duration 30s
 *
 * Options: --seed N or --seeds N,M,...; --duration (60s; `90s`, `2m`, or ms); --store
 * redis|sentinel|cluster|postgres|postgres-ha (or a comma list); --framework fastify|express; --clients (8); --out (the run
 * folders' parent, .test-results/nemesis/); --broken no-claim|ignore-fingerprint|
 * complete-no-owner-lean|complete-no-owner-full|no-principal|fresh-downstream-key (a deliberately broken build,
 * test/nemesis/broken.ts, for the checker's tests). Each run writes history.jsonl, executions.jsonl,
 * charges.json (the payment service's charges), faults.json, instances.json, summary.json, summary.txt, latency.svg and throughput.svg to its
 * folder. The exit code is 1 when any run has a violation.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { type AppProcess, startAppProcess } from '../helpers/app-process.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { BROKEN_BUILDS, type BrokenBuild } from './broken.js'
import { type CheckReport, check } from './checker.js'
import { clockWindowsText } from './clock-windows.js'
import { type Deployment, startDeployment } from './deployments/index.js'
import type {
  AppliedFault,
  BalanceRow,
  Charge,
  DepositRow,
  Execution,
  InstanceLife,
  Operation,
  ResumeOrderRow,
  StepLine,
} from './history.js'
import { type Instance, type Life, runFaults } from './nemesis.js'
import { latencyPlot, throughputPlot } from './plot.js'
import { type Fault, makeSchedule, type StoreMode } from './schedule.js'
import { readDeposits, readRecords, watchRoles } from './store-state.js'
import { sleep, Traffic } from './traffic.js'

export type Framework = 'fastify' | 'express'
export type { BrokenBuild } from './broken.js'

export interface NemesisOptions {
  readonly seed: number
  readonly store: StoreMode
  readonly framework: Framework
  readonly durationMs: number
  readonly clients?: number
  /** The run folder (created). */
  readonly dir: string
  readonly broken?: BrokenBuild
  /** Progress lines (stderr by default). */
  readonly log?: (line: string) => void
}

export interface NemesisResult {
  readonly dir: string
  readonly report: CheckReport
  readonly schedule: readonly Fault[]
}

const APP = 'test/nemesis/app.ts'
/** The downstream of `/resumes`: the example payment service, its own idemkit service and process. */
const PAYMENTS = 'examples/payments-app.ts'
const SECRET = 'n'.repeat(32)
const LEASE_MS = 3_000
/** claimTimeoutMs (3 s) + the longest handler (0.3 s) + recordRetryMs (5 s) + a loaded machine's slack. */
const BOUND_MS = 12_000
const QUIET_MS = 12_000

export async function runNemesis(options: NemesisOptions): Promise<NemesisResult> {
  const { seed, store: mode, framework, durationMs, clients = 8, dir, broken } = options
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`))
  mkdirSync(dir, { recursive: true })
  const executionLog = join(dir, 'executions.jsonl')
  /** Keeps what an app process wrote (its idempotency events) in the run folder. */
  const saveOutput = (app: AppProcess | undefined, pid: number) => {
    if (app !== undefined) writeFileSync(join(dir, `app-${pid}.log`), app.output())
  }
  writeFileSync(executionLog, '')
  const schedule = makeSchedule({ seed, store: mode, durationMs, quietMs: QUIET_MS })
  log(
    `nemesis: seed ${seed}, ${mode}, ${framework}, ${durationMs} ms, ${clients} clients, ${schedule.length} faults${broken ? `, broken build ${broken}` : ''}`,
  )

  let deployment: Deployment | undefined
  let payments: AppProcess | undefined
  let paymentsProxy: TcpProxy | undefined
  const proxies: TcpProxy[] = []
  const instances: Instance[] = []
  const lives: Life[] = []
  try {
    const store = await startDeployment(mode)
    deployment = store
    if (store.proxiedPort !== undefined)
      for (let i = 0; i < 3; i++) proxies.push(await startTcpProxy(store.proxiedPort))
    // The payment service keeps its records in its own process (neither store URL set).
    payments = await startAppProcess(PAYMENTS, {
      REDIS_URL: '',
      DATABASE_URL: '',
      IDEMPOTENCY_SECRET: 'p'.repeat(32),
    })
    const paymentsUrl = payments.url
    // Every instance calls it through this proxy, the payment service's faults' target.
    const paymentsRoute = await startTcpProxy(Number(new URL(paymentsUrl).port))
    paymentsProxy = paymentsRoute
    const appEnv = (i: number): Record<string, string> => ({
      FRAMEWORK: framework,
      IDEMPOTENCY_SECRET: SECRET,
      IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
      REDIS_COMMAND_TIMEOUT_MS: '1000',
      EXECUTION_LOG: executionLog,
      PAYMENTS_URL: `http://127.0.0.1:${paymentsRoute.port}`,
      NEMESIS_BROKEN: broken ?? '',
      // The second instance completes with one command (on Redis; PostgreSQL ignores it): a
      // fleet in which a build that writes record layout 4 runs beside one that does not.
      IDEMPOTENCY_ONE_COMMAND_COMPLETION: i === 1 ? '1' : '',
      ...store.env(proxies[i]?.port),
    })
    let origin = Date.now()
    const now = () => Date.now() - origin
    const startInstance = async (i: number): Promise<Instance> => {
      const app = await startAppProcess(APP, appEnv(i))
      const life: Life = { instance: i, pid: app.pid, started: now(), paused: [] }
      lives.push(life)
      return { app, url: app.url, life }
    }
    // One at a time: three instances migrating and compiling at once take longer on two cores.
    for (let i = 0; i < 3; i++) instances.push(await startInstance(i))
    origin = Date.now()
    for (const life of lives) life.started = 0

    // The load: the clients until the quiet phase, the nemesis meanwhile; on Sentinel the roles watched.
    const loadEnd = durationMs - QUIET_MS
    const traffic = new Traffic((i) => instances[i]?.url, now)
    const { operations, keys } = traffic
    // Deposits where the store keeps their rows (PostgreSQL): half the keys there.
    const deposits = store.databaseUrl() !== undefined
    const roleWatch = watchRoles(store, now)
    const [applied] = await Promise.all([
      runFaults({
        schedule,
        instances,
        proxies,
        deployment: store,
        payments: { pid: payments.pid, proxy: paymentsRoute },
        mode,
        loadEnd,
        now,
        startInstance,
        saveOutput,
        log,
      }),
      ...Array.from({ length: clients }, (_, c) => traffic.client(c, seed, loadEnd, deposits)),
    ])
    const roles = await roleWatch.stop()
    if (roles.length > 0) writeFileSync(join(dir, 'roles.jsonl'), `${roles.join('\n')}\n`)
    // The quiet phase: nothing fails; every lease runs out and every background settlement ends.
    const lastEnd = Math.max(0, ...operations.map((operation) => operation.end))
    await sleep(Math.max(durationMs - now(), lastEnd + LEASE_MS + 2_000 - now()))
    // The final probe of every key (the same request once more): its answer is the key's final state.
    await traffic.probe(seed, clients)
    const finished = now()
    log(`  load and probes done at ${finished} ms: ${operations.length} operations on ${keys.length} keys`)

    const records = await readRecords(store, keys, SECRET)
    writeFileSync(join(dir, 'records.json'), `${JSON.stringify(records, null, 1)}\n`)
    const rows = await readDeposits(store)
    const charges = ((await (await fetch(`${paymentsUrl}/charges`)).json()) as { charges: Charge[] }).charges
    writeFileSync(join(dir, 'charges.json'), `${JSON.stringify(charges, null, 1)}\n`)
    for (const instance of instances) {
      await instance.app?.stop('SIGKILL')
      saveOutput(instance.app, instance.life.pid)
    }
    const logged = readFileSync(executionLog, 'utf8')
      .split('\n')
      .filter((line) => line.length > 0)
      .map((line) => JSON.parse(line) as Execution | StepLine)
    const executions = logged.filter((line): line is Execution => line.type === 'execution')
    const steps = logged.filter((line): line is StepLine => line.type === 'step')
    const sorted = operations.sort((a, b) => a.op - b.op)
    const instanceLives: InstanceLife[] = lives.map((life) => ({ ...life }))
    const report = check({
      operations: sorted,
      executions,
      instances: instanceLives,
      faults: applied,
      origin,
      boundMs: BOUND_MS,
      records,
      charges,
      steps,
      ...(rows.deposits === undefined ? {} : { deposits: rows.deposits, balances: rows.balances }),
      ...(rows.resumeOrders === undefined ? {} : { resumeOrders: rows.resumeOrders }),
    })
    writeFileSync(join(dir, 'history.jsonl'), `${sorted.map((operation) => JSON.stringify(operation)).join('\n')}\n`)
    writeFileSync(join(dir, 'faults.json'), `${JSON.stringify({ schedule, applied }, null, 2)}\n`)
    writeFileSync(join(dir, 'instances.json'), `${JSON.stringify(instanceLives, null, 2)}\n`)
    // What --recheck needs besides the files above: offset 0 of the times, and the deposits.
    writeFileSync(
      join(dir, 'check-input.json'),
      `${JSON.stringify({ origin, boundMs: BOUND_MS, deposits: rows.deposits, balances: rows.balances, resumeOrders: rows.resumeOrders })}\n`,
    )
    const meta = { seed, store: mode, framework, durationMs, clients, broken: broken ?? null, elapsedMs: finished }
    const recordStates: Record<string, number> = {}
    for (const record of Object.values(records)) recordStates[record.state] = (recordStates[record.state] ?? 0) + 1
    writeFileSync(join(dir, 'summary.json'), `${JSON.stringify({ ...meta, ...report, recordStates }, null, 2)}\n`)
    writeFileSync(join(dir, 'summary.txt'), `${summaryText(meta, report, recordStates)}\n`)
    const title = `seed ${seed}, ${mode}, ${framework}, ${Math.round(durationMs / 1_000)} s${broken ? `, broken: ${broken}` : ''}`
    writeFileSync(join(dir, 'latency.svg'), latencyPlot(sorted, applied, title))
    writeFileSync(join(dir, 'throughput.svg'), throughputPlot(sorted, applied, title))
    log(summaryText(meta, report, recordStates))
    return { dir, report, schedule }
  } finally {
    for (const instance of instances) await instance.app?.stop('SIGKILL').catch(() => undefined)
    for (const life of lives) {
      // A paused process cannot die until it is continued.
      try {
        process.kill(life.pid, 'SIGCONT')
      } catch {
        // gone
      }
    }
    for (const proxy of proxies) await proxy.close().catch(() => undefined)
    await paymentsProxy?.close().catch(() => undefined)
    if (payments !== undefined) {
      writeFileSync(join(dir, `payments-${payments.pid}.log`), payments.output())
      await payments.stop('SIGKILL').catch(() => undefined)
    }
    await deployment?.stop().catch(() => undefined)
  }
}

const line = (record: Record<string, number>) =>
  Object.entries(record)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, value]) => `${name} ${value}`)
    .join(', ') || 'none'

export function summaryText(
  meta: Record<string, unknown>,
  report: CheckReport,
  recordStates: Record<string, number> = {},
): string {
  return [
    `run: ${Object.entries(meta)
      .filter(([, value]) => value !== null)
      .map(([name, value]) => `${name} ${value}`)
      .join(', ')}`,
    `operations: ${report.operations} on ${report.keys} keys, ${report.executions} handler executions`,
    `faults: ${line(report.faults)}`,
    `answers: ${line(report.answers)}`,
    `final states: ${line(report.finalStates)}`,
    `records after the probes: ${line(recordStates)}`,
    `routes: ${
      Object.entries(report.routes)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(
          ([route, counts]) =>
            `${route} ${counts.keys} keys, ${counts.executions} executions${counts.takenOver > 0 ? `, ${counts.takenOver} ${route === '/resumes' ? 'resumed' : 'taken over'}` : ''}${counts.waitedReplays > 0 ? `, ${counts.waitedReplays} waited for the replay` : ''}`,
        )
        .join('; ') || 'none'
    }`,
    `downstream: ${report.downstream.charges} charges by the payment service for ${report.downstream.keys} keys of /resumes (${report.downstream.chargedKeys} charged, ${report.downstream.resumedKeys} run more than once, ${report.downstream.resumedAfterKill} of them after a kill)`,
    ...(report.downstream.stepsRun + report.downstream.stepsSkipped > 0
      ? [
          `recovery points: ${report.downstream.stepsRun} charges committed as a step, ${report.downstream.stepsSkipped} re-runs found the step committed and skipped the call (${report.downstream.stepsSkippedAfterKill} after a kill)`,
        ]
      : []),
    `recovery-required because: ${line(report.recoveryReasons)}`,
    `limits (documented, not violations): ${line(report.limits)}`,
    ...(report.clock === undefined ? [] : [clockWindowsText(report.clock) as string]),
    `violations: ${report.violations.length}${report.violations.length > 0 ? ` (${line(report.violationsByKind)})` : ''}`,
    ...(report.firstViolation === undefined ? [] : [report.firstViolation]),
  ].join('\n')
}

function duration(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text)
  if (!match) throw new Error(`--duration ${text}: use e.g. 60s, 2m or 45000`)
  const value = Number(match[1])
  return Math.round(match[2] === 'm' ? value * 60_000 : match[2] === 's' ? value * 1_000 : value)
}

/**
 * `--recheck <folder>`: the checker again on a run folder's history, execution log, instances,
 * faults and records (a checker changed since the run). A folder written before check-input.json
 * existed has no offset 0 of its times nor the deposits: the offset is then the latest that puts
 * every execution inside a request of its key, and the deposits are not checked.
 */
function recheck(dir: string): number {
  const lines = (file: string) =>
    readFileSync(join(dir, file), 'utf8')
      .split('\n')
      .filter((line) => line.length > 0)
      .map((line) => JSON.parse(line))
  const operations = lines('history.jsonl') as Operation[]
  const logged = lines('executions.jsonl') as (Execution | StepLine)[]
  const executions = logged.filter((line): line is Execution => line.type === 'execution')
  const steps = logged.filter((line): line is StepLine => line.type === 'step')
  const instances = JSON.parse(readFileSync(join(dir, 'instances.json'), 'utf8')) as InstanceLife[]
  const savedFaults = JSON.parse(readFileSync(join(dir, 'faults.json'), 'utf8')) as { applied: AppliedFault[] }
  // A folder written before faults carried `delayMs` has it only in the detail, `<n> ms`.
  const applied = savedFaults.applied.map((fault) => {
    const delay = /^(\d+) ms$/.exec(fault.detail ?? '')?.[1]
    return fault.delayMs === undefined && fault.kind.endsWith('-latency') && delay !== undefined
      ? { ...fault, delayMs: Number(delay) }
      : fault
  })
  const records = JSON.parse(readFileSync(join(dir, 'records.json'), 'utf8')) as Record<string, { state: string }>
  let charges: Charge[] | undefined
  try {
    charges = JSON.parse(readFileSync(join(dir, 'charges.json'), 'utf8')) as Charge[]
  } catch {
    charges = undefined
  }
  const summary = JSON.parse(readFileSync(join(dir, 'summary.json'), 'utf8'))
  let saved:
    | {
        origin: number
        boundMs: number
        deposits?: DepositRow[]
        balances?: BalanceRow[]
        resumeOrders?: ResumeOrderRow[]
      }
    | undefined
  try {
    saved = JSON.parse(readFileSync(join(dir, 'check-input.json'), 'utf8'))
  } catch {
    saved = undefined
  }
  let origin = saved?.origin
  if (origin === undefined) {
    const firstEnd = new Map<string, number>()
    for (const operation of operations) {
      if (!firstEnd.has(operation.key) || operation.end < (firstEnd.get(operation.key) as number))
        firstEnd.set(operation.key, operation.end)
    }
    origin = -Infinity
    for (const execution of executions) {
      const end = firstEnd.get(execution.key)
      if (end !== undefined) origin = Math.max(origin, execution.time - end)
    }
  }
  const report = check({
    operations,
    executions,
    instances,
    faults: applied,
    origin,
    boundMs: saved?.boundMs ?? BOUND_MS,
    records,
    ...(charges === undefined ? {} : { charges }),
    steps,
    ...(saved?.deposits === undefined ? {} : { deposits: saved.deposits, balances: saved.balances ?? [] }),
    ...(saved?.resumeOrders === undefined ? {} : { resumeOrders: saved.resumeOrders }),
  })
  const recordStates: Record<string, number> = {}
  for (const record of Object.values(records)) recordStates[record.state] = (recordStates[record.state] ?? 0) + 1
  const meta = {
    seed: summary.seed,
    store: summary.store,
    framework: summary.framework,
    durationMs: summary.durationMs,
    clients: summary.clients,
    broken: summary.broken,
    elapsedMs: summary.elapsedMs,
  }
  process.stderr.write(
    `${summaryText(meta, report, recordStates)}\n  rechecked ${dir}${saved === undefined ? ' (offset estimated, deposits not checked)' : ''}\n`,
  )
  return report.violations.length > 0 ? 1 : 0
}

async function main(argv: readonly string[]): Promise<number> {
  const args = new Map<string, string>()
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i] as string
    if (!name.startsWith('--')) throw new Error(`unexpected argument ${name}`)
    args.set(name.slice(2), argv[i + 1] ?? '')
    i++
  }
  const known = ['seed', 'seeds', 'duration', 'store', 'framework', 'clients', 'out', 'broken', 'recheck']
  for (const name of args.keys()) if (!known.includes(name)) throw new Error(`unknown option --${name}`)
  const again = args.get('recheck')
  if (again !== undefined) return recheck(resolve(again))
  const seeds = (args.get('seeds') ?? args.get('seed') ?? '1').split(',').map(Number)
  const stores = (args.get('store') ?? 'redis').split(',') as StoreMode[]
  for (const store of stores)
    if (!['redis', 'sentinel', 'cluster', 'postgres', 'postgres-ha'].includes(store))
      throw new Error(`--store ${store}: redis, sentinel, cluster, postgres or postgres-ha`)
  const framework = (args.get('framework') ?? 'fastify') as Framework
  if (framework !== 'fastify' && framework !== 'express')
    throw new Error(`--framework ${framework}: fastify or express`)
  const broken = args.get('broken') as BrokenBuild | undefined
  if (broken !== undefined && !BROKEN_BUILDS.includes(broken))
    throw new Error(`--broken ${broken}: ${BROKEN_BUILDS.join(', ')}`)
  const out = resolve(args.get('out') ?? '.test-results/nemesis')
  let failed = 0
  for (const store of stores) {
    for (const seed of seeds) {
      if (!Number.isSafeInteger(seed)) throw new Error(`--seed: an integer`)
      const stamp = new Date().toISOString().replace(/[:.]/g, '-')
      const dir = join(out, `${store}-${framework}-seed${seed}-${stamp}`)
      const { report } = await runNemesis({
        seed,
        store,
        framework,
        durationMs: duration(args.get('duration') ?? '60s'),
        clients: Number(args.get('clients') ?? 8),
        dir,
        ...(broken ? { broken } : {}),
      })
      process.stderr.write(`  run folder: ${dir}\n`)
      if (report.violations.length > 0) failed++
    }
  }
  process.stderr.write(
    `nemesis: ${stores.length * seeds.length - failed} of ${stores.length * seeds.length} runs without a violation\n`,
  )
  return failed > 0 ? 1 : 0
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error) => {
      console.error(error)
      process.exit(2)
    },
  )
}
