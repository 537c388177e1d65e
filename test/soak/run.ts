/**
 * The soak run: the nemesis's store deployment (test/nemesis/deployments/), three app instances
 * (the nemesis app with a sampler beside it: instance.ts), each behind a TCP proxy of its own to
 * the store, an open-loop load at a fixed rate of new keys over many connections (load.ts, a
 * process of its own), and one fault every minute from the nemesis's menu for the store
 * (test/nemesis/nemesis.ts applies it). Every 10 s each instance samples its RSS, heap,
 * event-loop delay and active handles, and the runner the store's client connections and each
 * proxy's. At the end the apps' execution log is counted per key, and the run is judged against
 * its bounds (evaluate.ts; docs/nemesis.md, "Soak", states them).
 *
 *   npm run soak -- --store redis --duration 60m
 *   npm run soak -- --store postgres --duration 10m --rate 300
 *
 * Options: --store redis|postgres; --duration (10m; `90s`, `60m`); --rate (new keys per second;
 * 1500 on Redis, 400 on PostgreSQL); --fault-every (60s; `0` for none); --seed (1: the order of
 * the faults); --p99-bound (ms; 250 on Redis, 500 on PostgreSQL); --recovery-bound (30s);
 * --warmup (a fifth of the run, at most 2m); --connections (per instance, 32); --framework
 * fastify|express; --out (the run folder's parent, .test-results/soak/). The run folder gets
 * summary.json, summary.txt, samples.jsonl (every instance sample), store.jsonl, windows.jsonl
 * and the plots (*.svg). The exit code is 1 when a check fails.
 */
import { type ChildProcess, fork } from 'node:child_process'
import { createReadStream, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { loadavg } from 'node:os'
import { join, resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { pathToFileURL } from 'node:url'
import { Redis } from 'ioredis'
import pg from 'pg'
import { type AppProcess, startAppProcess } from '../helpers/app-process.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { type Deployment, startDeployment } from '../nemesis/deployments/index.js'
import type { AppliedFault } from '../nemesis/history.js'
import { type Instance, type Life, runFaults } from '../nemesis/nemesis.js'
import { type Fault, type FaultKind, INSTANT, KINDS, mulberry32 } from '../nemesis/schedule.js'
import {
  evaluate,
  ownHandles,
  type ProcessSample,
  type SoakBounds,
  type SoakVerdict,
  type StoreSample,
} from './evaluate.js'
import type { InstanceSample } from './instance.js'
import type { LoadDone, LoadWindow, StartMessage } from './load.js'
import { linePlot, type Series } from './plot.js'

export type SoakStore = 'redis' | 'postgres'

/**
 * The nemesis's menu for each store (test/nemesis/schedule.ts), one a minute in a seeded order,
 * without its clock steps: the soak's store runs on its own clock.
 */
const withoutClock = (kinds: readonly FaultKind[]) => kinds.filter((kind) => kind !== 'clock-step')
export const MENU: Readonly<Record<SoakStore, readonly FaultKind[]>> = {
  redis: withoutClock(KINDS.redis),
  postgres: withoutClock(KINDS.postgres),
}

const FAULT_MS = 5_000
/** A request answered later than this, or not at all, away from every fault is a hang. */
const HANG_MS = 12_000

/**
 * One fault every `everyMs` from `everyMs` on, each kind of the menu once per round in a seeded
 * order, each healed `recoveryMs` before the end. Instance 0 is never killed: one process lives
 * the whole run, for the flatness of its RSS and handles.
 */
export function soakSchedule(store: SoakStore, durationMs: number, everyMs: number, recoveryMs: number, seed: number) {
  const random = mulberry32(seed)
  const faults: Fault[] = []
  let round: FaultKind[] = []
  let kills = 0
  for (let at = everyMs, n = 0; everyMs > 0 && at + FAULT_MS + recoveryMs <= durationMs; at += everyMs, n++) {
    if (round.length === 0) {
      round = [...MENU[store]]
      for (let i = round.length - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1))
        ;[round[i], round[j]] = [round[j] as FaultKind, round[i] as FaultKind]
      }
    }
    const kind = round.shift() as FaultKind
    const instance = kind === 'instance-kill' ? 1 + (kills++ % 2) : n % 3
    const targeted = kind.startsWith('instance') || kind.startsWith('proxy') || kind === 'partition'
    faults.push({
      kind,
      at,
      durationMs: INSTANT.has(kind) ? 0 : FAULT_MS,
      ...(targeted ? { instance } : {}),
      ...(kind === 'proxy-latency' ? { delayMs: 200 } : {}),
    })
  }
  return faults
}

export interface SoakOptions {
  readonly store: SoakStore
  readonly durationMs: number
  readonly rate: number
  readonly faultEveryMs: number
  readonly seed: number
  readonly bounds: SoakBounds
  readonly connections: number
  readonly framework: 'fastify' | 'express'
  readonly dir: string
  readonly log?: (line: string) => void
}

const APP = 'test/soak/instance.ts'
const LOAD = 'test/soak/load.ts'
const SECRET = 's'.repeat(32)
const SAMPLE_MS = 10_000

/** The store's own count of client connections (its admin's left out), or null when it does not answer. */
async function storeCounter(
  store: SoakStore,
  deployment: Deployment,
): Promise<{ count(): Promise<number | null>; close(): Promise<void> }> {
  if (store === 'redis') {
    const client = new Redis({
      port: deployment.proxiedPort as number,
      host: '127.0.0.1',
      commandTimeout: 2_000,
      maxRetriesPerRequest: 0,
    })
    client.on('error', () => {})
    return {
      count: async () => {
        try {
          const list = String(await client.call('CLIENT', 'LIST', 'TYPE', 'normal'))
          return list.split('\n').filter((line) => line.trim().length > 0).length - 1
        } catch {
          return null
        }
      },
      close: async () => client.disconnect(),
    }
  }
  const url = deployment.databaseUrl() as string
  return {
    count: async () => {
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000, statement_timeout: 2_000 })
      client.on('error', () => {})
      try {
        await client.connect()
        const result = await client.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )
        return result.rows[0].n as number
      } catch {
        return null
      } finally {
        await client.end().catch(() => undefined)
      }
    },
    close: async () => {},
  }
}

interface StoreLine {
  readonly t: number
  readonly connections: number | null
  readonly proxies: readonly number[]
  readonly load1: number
}

export async function runSoak(options: SoakOptions) {
  const { store: mode, durationMs, dir, bounds } = options
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`))
  mkdirSync(dir, { recursive: true })
  const executionLog = join(dir, 'executions.jsonl')
  writeFileSync(executionLog, '')
  const samplesFile = (i: number) => join(dir, `samples-${i}.jsonl`)
  for (let i = 0; i < 3; i++) writeFileSync(samplesFile(i), '')
  const schedule = soakSchedule(mode, durationMs, options.faultEveryMs, bounds.recoveryMs, options.seed)
  log(
    `soak: ${mode}, ${options.framework}, ${durationMs / 1_000} s, ${options.rate} new keys/s, ${schedule.length} faults`,
  )
  let deployment: Deployment | undefined
  let load: ChildProcess | undefined
  const proxies: TcpProxy[] = []
  const instances: Instance[] = []
  const lives: Life[] = []
  const saveOutput = (app: AppProcess | undefined, pid: number) => {
    if (app !== undefined) writeFileSync(join(dir, `app-${pid}.log`), app.output().slice(-50_000))
  }
  try {
    deployment = await startDeployment(mode)
    const store = deployment
    for (let i = 0; i < 3; i++) proxies.push(await startTcpProxy(store.proxiedPort as number))
    let origin = Date.now()
    const now = () => Date.now() - origin
    const startInstance = async (i: number): Promise<Instance> => {
      const app = await startAppProcess(APP, {
        FRAMEWORK: options.framework,
        IDEMPOTENCY_SECRET: SECRET,
        IDEMPOTENCY_LEASE_MS: '3000',
        REDIS_COMMAND_TIMEOUT_MS: '1000',
        EXECUTION_LOG: executionLog,
        NEMESIS_BROKEN: '',
        SOAK_SAMPLES: samplesFile(i),
        SOAK_SAMPLE_MS: String(SAMPLE_MS),
        SOAK_INSTANCE: String(i),
        ...store.env(proxies[i]?.port),
      })
      const life: Life = { instance: i, pid: app.pid, started: now(), paused: [] }
      lives.push(life)
      return { app, url: app.url, life }
    }
    for (let i = 0; i < 3; i++) instances.push(await startInstance(i))
    const counter = await storeCounter(mode, store)

    // The load in a process of its own.
    const child = fork(LOAD, [], { execArgv: ['--import', 'tsx', '--max-old-space-size=4096'], stdio: 'inherit' })
    load = child
    const windows: LoadWindow[] = []
    const done = new Promise<LoadDone>((resolvePromise, reject) => {
      child.on('message', (message: LoadWindow | LoadDone) => {
        if (message.type === 'window') windows.push(message)
        else resolvePromise(message)
      })
      child.once('exit', (code) => reject(new Error(`the load exited with ${code} before its result`)))
    })
    // Held until awaited below: a load that dies early fails the run through its cleanup.
    done.catch(() => undefined)
    origin = Date.now()
    for (const life of lives) life.started = 0
    const start: StartMessage = {
      type: 'start',
      urls: instances.map((instance) => instance.url),
      rate: options.rate,
      durationMs,
      seed: options.seed,
      origin,
      connections: options.connections,
      maxInFlight: 2_000,
    }
    child.send(start)
    // The instances' URLs as they are now (a killed instance comes back on another port).
    let sentUrls = JSON.stringify(start.urls)
    const urlWatch = setInterval(() => {
      const urls = instances.map((instance) => (instance.app === undefined ? undefined : instance.url))
      const text = JSON.stringify(urls)
      if (text !== sentUrls && child.connected) {
        sentUrls = text
        child.send({ type: 'urls', urls })
      }
    }, 200)
    // The store's connections and each proxy's, every 10 s; progress every minute.
    const storeLines: StoreLine[] = []
    const sampler = (async () => {
      for (let next = SAMPLE_MS; next <= durationMs; next += SAMPLE_MS) {
        await sleep(next - now())
        storeLines.push({
          t: now(),
          connections: await counter.count(),
          proxies: proxies.map((proxy) => proxy.open()),
          load1: loadavg()[0] as number,
        })
        if (next % 60_000 === 0) {
          const last = windows[windows.length - 1]
          log(
            `  ${next / 60_000} min: load average ${loadavg()[0]?.toFixed(2)}${last ? `, window at ${last.start / 1_000} s: ${last.sent} sent, p99 ${last.p99} ms` : ''}`,
          )
        }
      }
    })()
    const applied: AppliedFault[] = await runFaults({
      schedule,
      instances,
      proxies,
      deployment: store,
      mode,
      loadEnd: durationMs,
      now,
      startInstance,
      saveOutput,
      log,
    })
    await sampler
    const result = await done
    clearInterval(urlWatch)
    await counter.close()
    for (const instance of instances) {
      await instance.app?.stop('SIGKILL')
      saveOutput(instance.app, instance.life.pid)
    }

    // The handler executions per key, from the apps' log.
    const executions = new Map<string, number>()
    let executionCount = 0
    const lines = createInterface({ input: createReadStream(executionLog), crlfDelay: Infinity })
    for await (const line of lines) {
      if (line.length === 0) continue
      const execution = JSON.parse(line) as { type: string; key: string; user: string }
      if (execution.type !== 'execution') continue
      executionCount++
      const key = `${execution.user}/${execution.key}`
      executions.set(key, (executions.get(key) ?? 0) + 1)
    }
    const duplicates = [...executions].filter(([, count]) => count > 1)
    executions.clear()
    const hangs = result.slow.filter(
      (slow) =>
        !applied.some((fault) => slow.start < fault.end + HANG_MS && slow.end > fault.start) &&
        (slow.end - slow.start > HANG_MS || slow.answer === 'timeout'),
    )
    const violationsByKind: Record<string, number> = { ...result.violationsByKind }
    if (duplicates.length > 0) violationsByKind['duplicate-execution'] = duplicates.length
    if (hangs.length > 0) violationsByKind.hang = hangs.length
    const violations = Object.values(violationsByKind).reduce((sum, count) => sum + count, 0)

    // Samples, as offsets.
    const raw: InstanceSample[] = []
    for (let i = 0; i < 3; i++)
      for (const line of readFileSync(samplesFile(i), 'utf8').split('\n'))
        if (line.length > 0) raw.push(JSON.parse(line) as InstanceSample)
    raw.sort((a, b) => a.time - b.time)
    const samples: ProcessSample[] = raw.map((sample) => ({
      t: sample.time - origin,
      pid: sample.pid,
      instance: sample.instance,
      rss: sample.rss,
      handles: ownHandles(sample.resources, sample.inbound),
      timers: sample.resources.Timeout ?? 0,
    }))
    const storeSamples: StoreSample[] = storeLines.map(({ t, connections }) => ({ t, connections }))
    windows.sort((a, b) => a.start - b.start)
    const verdict = evaluate({
      durationMs,
      bounds,
      samples,
      store: storeSamples,
      windows,
      secondP99: result.secondP99,
      faults: applied,
      violations,
    })

    const loads = storeLines.map((line) => line.load1)
    const meta = {
      store: mode,
      framework: options.framework,
      durationMs,
      rate: options.rate,
      seed: options.seed,
      connectionsPerInstance: options.connections,
      faults: applied.length,
      loadAverage: {
        mean: Number((loads.reduce((sum, value) => sum + value, 0) / Math.max(1, loads.length)).toFixed(2)),
        max: Number(Math.max(0, ...loads).toFixed(2)),
      },
    }
    const summary = {
      ...meta,
      pass: verdict.pass,
      bounds,
      requests: result.requests,
      keys: result.keys,
      shed: result.shed,
      answersPerSecond: Math.round(result.requests / (durationMs / 1_000)),
      answers: result.counts,
      unanswered: result.unanswered,
      executions: executionCount,
      violations,
      violationsByKind,
      firstViolations: [
        ...result.violations.slice(0, 20),
        ...duplicates
          .slice(0, 20)
          .map(([key, count]) => ({ kind: 'duplicate-execution', key, detail: `${count} executions` })),
        ...hangs.slice(0, 20).map((hang) => ({ kind: 'hang', key: hang.key, detail: JSON.stringify(hang) })),
      ],
      checks: verdict.checks,
      rssGrowth: verdict.rss,
      handlesGrowth: verdict.handles,
      timersGrowth: verdict.timers,
      storeConnections: verdict.storeConnections,
      steadyP99Max: verdict.steadyP99Max,
      recoveries: verdict.recoveries,
      faultsApplied: applied,
      loadRss: result.rss,
    }
    writeFileSync(join(dir, 'summary.json'), `${JSON.stringify(summary, null, 2)}\n`)
    writeFileSync(join(dir, 'samples.jsonl'), `${raw.map((sample) => JSON.stringify(sample)).join('\n')}\n`)
    writeFileSync(join(dir, 'store.jsonl'), `${storeLines.map((line) => JSON.stringify(line)).join('\n')}\n`)
    writeFileSync(join(dir, 'windows.jsonl'), `${windows.map((window) => JSON.stringify(window)).join('\n')}\n`)
    writeFileSync(join(dir, 'faults.json'), `${JSON.stringify({ schedule, applied }, null, 2)}\n`)
    const text = summaryText(summary, verdict)
    writeFileSync(join(dir, 'summary.txt'), `${text}\n`)
    writePlots(dir, mode, durationMs, bounds, raw, origin, storeLines, windows, result, applied)
    log(text)
    log(`  run folder: ${dir}`)
    return { dir, pass: verdict.pass, summary }
  } finally {
    if (load !== undefined && load.exitCode === null) load.kill('SIGKILL')
    for (const instance of instances) await instance.app?.stop('SIGKILL').catch(() => undefined)
    for (const life of lives) {
      try {
        process.kill(life.pid, 'SIGCONT')
      } catch {
        // gone
      }
    }
    for (const proxy of proxies) await proxy.close().catch(() => undefined)
    await deployment?.stop().catch(() => undefined)
  }
}

const entries = (record: Record<string, number>) =>
  Object.entries(record)
    .sort(([, a], [, b]) => b - a)
    .map(([name, value]) => `${name} ${value}`)
    .join(', ') || 'none'

interface SummaryFigures {
  readonly store: string
  readonly framework: string
  readonly durationMs: number
  readonly rate: number
  readonly seed: number
  readonly faults: number
  readonly loadAverage: { readonly mean: number; readonly max: number }
  readonly requests: number
  readonly answersPerSecond: number
  readonly keys: number
  readonly shed: number
  readonly executions: number
  readonly answers: Record<string, number>
  readonly unanswered: Record<string, number>
  readonly violations: number
  readonly violationsByKind: Record<string, number>
}

function summaryText(s: SummaryFigures, verdict: SoakVerdict): string {
  return [
    `soak: ${s.store}, ${s.framework}, ${s.durationMs / 1_000} s, ${s.rate} new keys/s, seed ${s.seed}, ${s.faults} faults; load average mean ${s.loadAverage.mean}, max ${s.loadAverage.max}`,
    `requests: ${s.requests} (${s.answersPerSecond}/s) on ${s.keys} keys, ${s.shed} shed; ${s.executions} handler executions`,
    `answers: ${entries(s.answers)}`,
    `keys with no 2xx: ${entries(s.unanswered)}`,
    `violations: ${s.violations}${s.violations > 0 ? ` (${entries(s.violationsByKind)})` : ''}`,
    ...verdict.checks.map((check) => `${check.pass ? 'PASS' : 'FAIL'} ${check.name}: ${check.detail}`),
    verdict.pass ? 'soak: pass' : 'soak: FAIL',
  ].join('\n')
}

function writePlots(
  dir: string,
  mode: string,
  durationMs: number,
  bounds: SoakBounds,
  raw: readonly InstanceSample[],
  origin: number,
  storeLines: readonly StoreLine[],
  windows: readonly LoadWindow[],
  result: LoadDone,
  faults: readonly AppliedFault[],
): void {
  const title = `${mode}, ${durationMs / 60_000} min`
  const byProcess = (value: (sample: InstanceSample) => number): Series[] => {
    const groups = new Map<number, InstanceSample[]>()
    for (const sample of raw) groups.set(sample.pid, [...(groups.get(sample.pid) ?? []), sample])
    return [...groups.values()]
      .sort((a, b) => (a[0]?.instance ?? 0) - (b[0]?.instance ?? 0) || (a[0]?.time ?? 0) - (b[0]?.time ?? 0))
      .map((list) => ({
        label: `instance ${list[0]?.instance} (pid ${list[0]?.pid})`,
        points: list.map((sample) => [sample.time - origin, value(sample)] as const),
      }))
  }
  const common = { endMs: durationMs, faults, warmupMs: bounds.warmupMs }
  const mib = (bytes: number) => Number((bytes / 1_048_576).toFixed(1))
  const plots: Record<string, string> = {
    'rss.svg': linePlot({
      ...common,
      title: `${title}: RSS per instance`,
      yLabel: 'RSS (MiB)',
      series: byProcess((s) => mib(s.rss)),
    }),
    'heap.svg': linePlot({
      ...common,
      title: `${title}: V8 heap used per instance`,
      yLabel: 'heap used (MiB)',
      series: byProcess((s) => mib(s.heapUsed)),
    }),
    'event-loop.svg': linePlot({
      ...common,
      title: `${title}: event-loop delay p99 per instance (per 10 s)`,
      yLabel: 'delay p99 (ms)',
      series: byProcess((s) => Number(s.loopP99.toFixed(1))),
    }),
    'handles.svg': linePlot({
      ...common,
      title: `${title}: active handles but timers and the load's sockets, per instance`,
      yLabel: 'sockets, servers, pipes',
      series: byProcess((s) => ownHandles(s.resources, s.inbound)),
    }),
    'inbound.svg': linePlot({
      ...common,
      title: `${title}: the load's open connections per instance`,
      yLabel: 'accepted sockets',
      series: byProcess((s) => s.inbound ?? 0),
    }),
    'timers.svg': linePlot({
      ...common,
      title: `${title}: active timers per instance`,
      yLabel: 'timers',
      series: byProcess((s) => s.resources.Timeout ?? 0),
    }),
  }
  // Handles by type, of instance 0's first process (never killed).
  const first = raw.filter((sample) => sample.instance === 0 && sample.pid === raw.find((s) => s.instance === 0)?.pid)
  const types = [...new Set(first.flatMap((sample) => Object.keys(sample.resources)))].sort()
  plots['handles-by-type.svg'] = linePlot({
    ...common,
    title: `${title}: instance 0's active handles by type`,
    yLabel: 'active resources',
    series: types.map((type) => ({
      label: type,
      points: first.map((sample) => [sample.time - origin, sample.resources[type] ?? 0] as const),
    })),
  })
  plots['store-connections.svg'] = linePlot({
    ...common,
    title: `${title}: store client connections (store's count) and through each proxy`,
    yLabel: 'connections',
    series: [
      {
        label: 'store',
        points: storeLines
          .filter((line) => line.connections !== null)
          .map((line) => [line.t, line.connections as number] as const),
      },
      ...[0, 1, 2].map((i) => ({
        label: `proxy of instance ${i}`,
        dashed: true,
        points: storeLines.map((line) => [line.t, line.proxies[i] ?? 0] as const),
      })),
    ],
  })
  const classes = [...new Set(windows.flatMap((window) => Object.keys(window.classes)))].sort()
  plots['throughput.svg'] = linePlot({
    ...common,
    title: `${title}: answers per second by class (per 10 s)`,
    yLabel: 'answers per second',
    series: classes.map((label) => ({
      label,
      points: windows.map((window) => [window.start + 5_000, (window.classes[label]?.answers ?? 0) / 10] as const),
    })),
  })
  const main = classes.filter((label) => ['201', 'replay', '409', '503 unavailable'].includes(label))
  plots['latency.svg'] = linePlot({
    ...common,
    log: true,
    title: `${title}: p50 (dashed) and p99 by class, per 10 s`,
    yLabel: 'latency (ms, log)',
    bound: { value: bounds.p99Ms, label: `p99 bound ${bounds.p99Ms} ms` },
    series: main.flatMap((label) => [
      {
        label: `${label} p99`,
        points: windows
          .filter((window) => (window.classes[label]?.sent ?? 0) > 0)
          .map((window) => [window.start + 5_000, Math.max(1, window.classes[label]?.p99 ?? 0)] as const),
      },
      {
        label: `${label} p50`,
        dashed: true,
        points: windows
          .filter((window) => (window.classes[label]?.sent ?? 0) > 0)
          .map((window) => [window.start + 5_000, Math.max(1, window.classes[label]?.p50 ?? 0)] as const),
      },
    ]),
  })
  plots['p99-per-second.svg'] = linePlot({
    ...common,
    log: true,
    title: `${title}: p99 of the requests sent each second (recovery after each fault)`,
    yLabel: 'p99 (ms, log)',
    bound: { value: bounds.p99Ms, label: `bound ${bounds.p99Ms} ms` },
    series: [
      {
        label: 'all answers',
        points: result.secondP99.flatMap((p99, second) =>
          p99 === null ? [] : [[second * 1_000 + 500, Math.max(1, p99)] as const],
        ),
      },
    ],
  })
  for (const [name, svg] of Object.entries(plots)) writeFileSync(join(dir, name), svg)
}

const sleep = (ms: number) => new Promise((resolvePromise) => setTimeout(resolvePromise, Math.max(0, ms)))

export function duration(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text)
  if (!match) throw new Error(`${text}: use e.g. 90s, 10m or 45000`)
  const value = Number(match[1])
  return Math.round(match[2] === 'm' ? value * 60_000 : match[2] === 's' ? value * 1_000 : value)
}

async function main(argv: readonly string[]): Promise<number> {
  const args = new Map<string, string>()
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i] as string
    if (!name.startsWith('--')) throw new Error(`unexpected argument ${name}`)
    args.set(name.slice(2), argv[i + 1] ?? '')
  }
  const known = [
    'store',
    'duration',
    'rate',
    'fault-every',
    'seed',
    'p99-bound',
    'recovery-bound',
    'warmup',
    'connections',
    'framework',
    'out',
  ]
  for (const name of args.keys()) if (!known.includes(name)) throw new Error(`unknown option --${name}`)
  const store = (args.get('store') ?? 'redis') as SoakStore
  if (store !== 'redis' && store !== 'postgres') throw new Error('--store redis|postgres')
  const framework = (args.get('framework') ?? 'fastify') as 'fastify' | 'express'
  const durationMs = duration(args.get('duration') ?? '10m')
  const bounds: SoakBounds = {
    warmupMs: duration(args.get('warmup') ?? String(Math.min(120_000, Math.round(durationMs / 5)))),
    p99Ms: Number(args.get('p99-bound') ?? (store === 'redis' ? 250 : 500)),
    recoveryMs: duration(args.get('recovery-bound') ?? '30s'),
    rssGrowth: 64 * 1_048_576,
    handlesGrowth: 10,
    timersGrowth: 100,
    storeConnectionsGrowth: 10,
  }
  const stamp = new Date().toISOString().replace(/[:.]/g, '-')
  const dir = resolve(args.get('out') ?? '.test-results/soak', `${store}-${Math.round(durationMs / 1_000)}s-${stamp}`)
  const { pass } = await runSoak({
    store,
    durationMs,
    rate: Number(args.get('rate') ?? (store === 'redis' ? 1500 : 400)),
    faultEveryMs: duration(args.get('fault-every') ?? '60s'),
    seed: Number(args.get('seed') ?? 1),
    bounds,
    connections: Number(args.get('connections') ?? 32),
    framework,
    dir,
  })
  return pass ? 0 : 1
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
