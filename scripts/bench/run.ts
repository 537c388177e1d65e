/**
 * `npm run bench [-- --quick] [-- --framework fastify] [-- --modes bare,pg-floor,postgres] [-- --baseline <dir>]`: the cost
 * of idempotency against the bare route and against the round-trip floor, per framework and scenario.
 * `--baseline <dir>` adds a `redis-baseline` server: the layer on Redis as built in another
 * checkout (its `dist/`, built there first), measured in the same interleaved rounds, so a
 * change is compared with the build before it in one run.
 *
 * Starts its own redis-server and PostgreSQL cluster on 127.0.0.1, one process per server under test, and drives each
 * with autocannon over loopback. Rounds are interleaved (every server once per scenario, then
 * the next round) so that drift of this machine hits all servers alike; the table reports
 * medians over rounds, and ratios computed round by round, then their median.
 * Servers (server.ts): bare, floor (plain GETs in place of the layer's round trips), store (the
 * Redis store's own script calls with nothing around them: the design's floor), redis and
 * memory (the layer on each store), pg-floor (plain `SELECT 1` round trips through a pg.Pool in
 * place of the PostgreSQL store's calls), pg-rows (the same round trips as a plain INSERT and
 * UPDATE, or SELECT, of a row by key) and postgres (the layer on the PostgreSQL store; first
 * executions and replays). Besides req/s and latency it reports the server's and the store
 * server's CPU time per request (redis-server, or every PostgreSQL process): on a machine where
 * load generator, server and store share the cores, CPU per request is what decides the ratios.
 * Nothing here asserts a timing: it prints figures.
 */
import { type ChildProcess, execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { cpus, totalmem } from 'node:os'
import { resolve } from 'node:path'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import pg from 'pg'
import { postgresBinDir, startPostgresServer } from '../postgres-server.js'
import { commandCalls, startRedisServer } from '../redis-server.js'
import { benchChart, type ChartRow } from './chart.js'
import { ensureBuilt, median, postgresCpuUs, redisCpuUs, startBenchServer } from './common.js'
import { PEER_STORE, PEERS, type Peer } from './peers.js'

const args = process.argv.slice(2)
const quick = args.includes('--quick')
const onlyFramework = args.includes('--framework') ? args[args.indexOf('--framework') + 1] : undefined
/** Where the SVG chart per framework goes (`bench-<framework>.svg`). */
const chartsDir = args.includes('--charts') ? (args[args.indexOf('--charts') + 1] as string) : '.bench'
/** `--baseline <dir>`: another checkout whose `dist/` the `redis-baseline` server loads. */
const baselineDir = args.includes('--baseline') ? resolve(args[args.indexOf('--baseline') + 1] as string) : undefined
const ROUNDS = quick ? 1 : 3
const DURATION_S = quick ? 0.3 : 1
const CONNECTIONS = 32
/** Each server runs each scenario once for this long before the measured rounds. */
const WARMUP_S = 0.3

const FRAMEWORKS = ['fastify', 'express', 'hono', 'nest', 'fetch', 'koa'].filter(
  (name) => onlyFramework === undefined || name === onlyFramework,
)
/** The frameworks added later run the layer beside their bare route and the floor only (no peer is wired for them). */
const FULL_FRAMEWORKS: ReadonlySet<string> = new Set(['fastify', 'express'])
const LATER_MODES: readonly string[] = ['bare', 'floor', 'floor-corked', 'redis', 'memory']
const OWN_MODES = [
  'bare',
  'floor',
  'floor-corked',
  'floor-node-redis',
  'store',
  'redis',
  'redis-baseline',
  'memory',
  'pg-floor',
  'pg-rows',
  'postgres',
] as const
const MODES = [...OWN_MODES, ...(Object.keys(PEERS) as Peer[])] as const
type Mode = (typeof MODES)[number]
const isPeer = (mode: Mode): mode is Peer => mode in PEERS
/** `--modes bare,pg-floor,postgres`: only these servers (a row's floor must be among them for its `× floor`). */
const onlyModes = args.includes('--modes') ? new Set(args[args.indexOf('--modes') + 1]?.split(',')) : undefined
/** The servers a framework runs: ours, and the peers wired for it. */
const modesOf = (framework: string): Mode[] =>
  (FULL_FRAMEWORKS.has(framework)
    ? MODES.filter((mode) => !isPeer(mode) || (PEERS[mode] as readonly string[]).includes(framework))
    : MODES.filter((mode) => LATER_MODES.includes(mode))
  )
    .filter((mode) => onlyModes === undefined || onlyModes.has(mode))
    .filter((mode) => mode !== 'redis-baseline' || baselineDir !== undefined)
/** A peer's records and ours on the same store are compared: redis with Redis peers, memory with in-memory ones. */
const peersOf = (framework: string, store: 'redis' | 'memory'): Peer[] =>
  modesOf(framework).filter((mode): mode is Peer => isPeer(mode) && PEER_STORE[mode] === store)
const SCENARIOS = ['first', 'replay', 'contention', 'wait', 'mismatch', 'slow'] as const
type Scenario = (typeof SCENARIOS)[number]
/**
 * The `store` server (the store's own script calls, no layer around them) and the node-redis
 * floor are measured where they tell something new: a first execution (claim + complete) and a
 * replay (one claim).
 */
const measured = (framework: string, mode: Mode, scenario: Scenario) =>
  (FULL_FRAMEWORKS.has(framework) && mode !== 'store' && mode !== 'floor-node-redis' && !onPostgres(mode)) ||
  scenario === 'first' ||
  scenario === 'replay'
/**
 * The floor a row's `× floor` is against: pg-floor for PostgreSQL; for the layer's Redis rows
 * (redis, store) the floor with the same write batching as the store (`coalesceWrites`: the
 * socket corked per turn of the event loop); the plain floor for the rest, the peers among them.
 */
const floorOf = (mode: Mode): Mode =>
  onPostgres(mode) ? 'pg-floor' : onRedisLayer(mode) || mode === 'store' ? 'floor-corked' : 'floor'
/** The layer on Redis: this build's, or the baseline's. */
const onRedisLayer = (mode: Mode) => mode === 'redis' || mode === 'redis-baseline'
/** The modes whose store is PostgreSQL: their floor is pg-floor, their store CPU PostgreSQL's. */
const onPostgres = (mode: Mode) => mode === 'postgres' || mode === 'pg-floor' || mode === 'pg-rows'

/** The stores a server talks to, for its figures. */
interface Stores {
  readonly redis: Redis
  readonly redisUrl: string
  readonly postgresUrl: string
  readonly postgresPid: number
}

interface Server {
  readonly framework: string
  readonly mode: Mode
  readonly url: string
  readonly child: ChildProcess
}

interface Sample {
  readonly rps: number
  readonly p50: number
  readonly p99: number
  readonly commandsPerRequest: number
  readonly executionsPerRequest: number
  /** The server process's own CPU time per request (user + system), in microseconds. */
  readonly cpuUsPerRequest: number
  /**
   * The store server's CPU time per request, in microseconds: redis-server's (user + system,
   * from INFO cpu), or every PostgreSQL process's for the PostgreSQL modes.
   */
  readonly storeCpuUsPerRequest: number
  readonly non2xx: number
  readonly errors: number
}

const BODY = JSON.stringify({ item: 'book', qty: 1 })
const OTHER_BODY = JSON.stringify({ item: 'pen', qty: 2 })

async function startServer(framework: string, mode: Mode, stores: Stores): Promise<Server> {
  const started = await startBenchServer({
    FRAMEWORK: framework,
    MODE: mode === 'redis-baseline' ? 'redis' : mode,
    REDIS_URL: stores.redisUrl,
    DATABASE_URL: stores.postgresUrl,
    ...(mode === 'redis-baseline' ? { IDEMKIT_BENCH_DIST: `${baselineDir}/dist/` } : {}),
  })
  return { framework, mode, ...started }
}

interface ServerStats {
  executions: number
  maxRssKb: number
  cpuUs: number
  poolCheckouts: number
  redisCommands: number
}

async function serverStats(server: Server): Promise<ServerStats> {
  const response = await fetch(`${server.url}/__stats`)
  return (await response.json()) as ServerStats
}

/**
 * The commands the server sent its store: Redis commands (a script call is one; pipelined
 * commands count one each), or PostgreSQL store calls (pool checkouts).
 */
async function roundTrips(stores: Stores, server: Server): Promise<number> {
  if (onPostgres(server.mode)) return (await serverStats(server)).poolCheckouts
  const redis = stores.redis
  const mode = server.mode
  // The layer's servers and the ioredis floors count what their client sent.
  if (!isPeer(mode) && mode !== 'floor-node-redis') return (await serverStats(server)).redisCommands
  const calls = await commandCalls(redis)
  const count = (name: string) => calls[name] ?? 0
  // A peer sends plain commands; each is a round trip of its own.
  if (isPeer(mode))
    return ['get', 'set', 'del', 'setnx', 'exists', 'expire', 'pexpire'].reduce((sum, n) => sum + count(n), 0)
  const scripts = count('evalsha') + count('eval') + count('fcall')
  // Every script reads its record with one GET inside it; the other GETs are the floor's own.
  return scripts + Math.max(0, count('get') - scripts)
}

const post = (url: string, key: string, body: string, holdMs = 0) =>
  fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'idempotency-key': key,
      ...(holdMs > 0 ? { 'x-hold-ms': String(holdMs) } : {}),
    },
    body,
  })

/** Prepares a scenario on a server: the keys and bodies its requests use. */
async function prepare(server: Server, scenario: Scenario, round: number, durationS: number) {
  const tag = `${scenario}-${round}-${randomBytes(4).toString('hex')}`
  const url = `${server.url}/${scenario}`
  let counter = 0
  let hold: Promise<Response> | undefined
  let keys: string[] = []
  let body = BODY
  switch (scenario) {
    case 'first':
    case 'slow':
      break
    case 'replay':
      keys = Array.from({ length: 8 }, (_, i) => `${tag}-${i}`)
      for (const key of keys) await post(url, key, BODY)
      break
    case 'contention':
      keys = [tag]
      hold = post(url, tag, BODY, durationS * 1000 + 300)
      await new Promise((resolve) => setTimeout(resolve, 50))
      break
    case 'mismatch':
      keys = [tag]
      await post(url, tag, BODY)
      body = OTHER_BODY
      break
    case 'wait': {
      // A new key every 100 ms, shared by every connection: duplicates of a request still running.
      const started = performance.now()
      return { url, body, nextKey: () => `${tag}-${Math.floor((performance.now() - started) / 100)}`, hold }
    }
  }
  const nextKey = () => (keys.length > 0 ? (keys[counter++ % keys.length] as string) : `${tag}-${counter++}`)
  return { url, body, nextKey, hold }
}

const storeCpuUs = (stores: Stores, mode: Mode) =>
  onPostgres(mode) ? Promise.resolve(postgresCpuUs(stores.postgresPid)) : redisCpuUs(stores.redis)

async function measure(
  server: Server,
  scenario: Scenario,
  round: number,
  stores: Stores,
  durationS = DURATION_S,
): Promise<Sample> {
  const { url, body, nextKey, hold } = await prepare(server, scenario, round, durationS)
  const beforeStats = await serverStats(server)
  const beforeTrips = await roundTrips(stores, server)
  const beforeStoreCpu = await storeCpuUs(stores, server.mode)
  const result = await autocannon({
    url,
    connections: CONNECTIONS,
    duration: durationS,
    // Samples of 100 ms, so a run lasts DURATION_S (with 1 s samples a short run lasts 1 s).
    sampleInt: 100,
    requests: [
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        setupRequest: (request) => {
          request.headers = { ...request.headers, 'idempotency-key': nextKey() }
          return request
        },
      },
    ],
  })
  const afterStoreCpu = await storeCpuUs(stores, server.mode)
  const afterTrips = await roundTrips(stores, server)
  const afterStats = await serverStats(server)
  await hold
  const requests = Math.max(1, result.requests.total)
  return {
    rps: result.requests.total / Math.max(0.001, result.duration),
    p50: result.latency.p50,
    p99: result.latency.p99,
    commandsPerRequest: (afterTrips - beforeTrips) / requests,
    executionsPerRequest: (afterStats.executions - beforeStats.executions) / requests,
    cpuUsPerRequest: (afterStats.cpuUs - beforeStats.cpuUs) / requests,
    storeCpuUsPerRequest: (afterStoreCpu - beforeStoreCpu) / requests,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
  }
}

/** The lowest and highest of per-round ratios, e.g. `0.41-0.55`: how much the rounds agree. */
const spread = (values: number[]) => `${Math.min(...values).toFixed(2)}-${Math.max(...values).toFixed(2)}`

function versionOf(name: string): string {
  // Read from node_modules: some packages (hono) do not export their package.json.
  try {
    return JSON.parse(readFileSync(`node_modules/${name}/package.json`, 'utf8')).version
  } catch {
    return '?'
  }
}

async function main(): Promise<void> {
  const started = Date.now()
  // The servers load the compiled package, as users run it: build it unless it is up to date.
  ensureBuilt()
  const [redisServer, postgresServer] = await Promise.all([startRedisServer(), startPostgresServer()])
  const redis = new Redis(redisServer.url)
  const stores: Stores = {
    redis,
    redisUrl: redisServer.url,
    postgresUrl: postgresServer.url,
    postgresPid: postgresServer.pid,
  }
  const servers: Server[] = []
  try {
    const pool = new pg.Pool({ connectionString: postgresServer.url, max: 1 })
    const core = await import(new URL('../../dist/src/index.js', import.meta.url).href)
    await core.postgresStore({ pool, sweepIntervalMs: 0 }).migrate()
    await pool.end()
    // Each server joins the list as soon as it is up, so `finally` stops it even if another fails.
    await Promise.all(
      FRAMEWORKS.flatMap((framework) =>
        modesOf(framework).map((mode) => startServer(framework, mode, stores).then((server) => servers.push(server))),
      ),
    )
    // Measure in a fixed order, whatever order the servers came up in.
    servers.sort(
      (a, b) =>
        FRAMEWORKS.indexOf(a.framework) - FRAMEWORKS.indexOf(b.framework) ||
        MODES.indexOf(a.mode) - MODES.indexOf(b.mode),
    )
    // Warm-up, not measured: every server runs each scenario once, so the JIT has compiled the
    // paths the rounds measure (short runs would otherwise mostly measure a cold server).
    for (const scenario of SCENARIOS) {
      for (const server of servers)
        if (measured(server.framework, server.mode, scenario)) await measure(server, scenario, -1, stores, WARMUP_S)
    }
    // samples[framework/mode/scenario] = one sample per round
    const samples = new Map<string, Sample[]>()
    for (let round = 0; round < ROUNDS; round++) {
      for (const scenario of SCENARIOS) {
        for (const server of servers) {
          if (!measured(server.framework, server.mode, scenario)) continue
          const sample = await measure(server, scenario, round, stores)
          const id = `${server.framework}/${server.mode}/${scenario}`
          samples.set(id, [...(samples.get(id) ?? []), sample])
        }
      }
    }
    const rss = new Map<string, number>()
    for (const server of servers) rss.set(`${server.framework}/${server.mode}`, (await serverStats(server)).maxRssKb)
    print(samples, rss, Date.now() - started)
    writeCharts(samples)
  } finally {
    for (const server of servers) server.child.kill('SIGKILL')
    redis.disconnect()
    await Promise.all([redisServer.stop(), postgresServer.stop()])
  }
}

/** Writes one chart per framework: req/s and CPU per request, per scenario and server. */
function writeCharts(samples: Map<string, Sample[]>): void {
  mkdirSync(chartsDir, { recursive: true })
  for (const framework of FRAMEWORKS) {
    const rows: ChartRow[] = []
    for (const scenario of SCENARIOS) {
      for (const mode of modesOf(framework)) {
        const runs = samples.get(`${framework}/${mode}/${scenario}`)
        if (!measured(framework, mode, scenario) || !runs?.length) continue
        rows.push({
          scenario,
          server: mode,
          rps: median(runs.map((r) => r.rps)),
          serverCpuUs: median(runs.map((r) => r.cpuUsPerRequest)),
          storeCpuUs: median(runs.map((r) => r.storeCpuUsPerRequest)),
        })
      }
    }
    const title = `${framework}: ${quick ? 'quick' : 'default'} run, ${new Date().toISOString().slice(0, 10)}, medians of ${ROUNDS} round(s)`
    const path = `${chartsDir}/bench-${framework}.svg`
    writeFileSync(path, benchChart(title, rows, modesOf(framework)))
    console.log(`Chart: ${path}`)
  }
}

/** The baseline checkout's commit, short, or `?` when it is not a git checkout. */
function baselineCommit(): string {
  try {
    return execFileSync('git', ['-C', baselineDir as string, 'rev-parse', '--short', 'HEAD'], {
      encoding: 'utf8',
    }).trim()
  } catch {
    return '?'
  }
}

function print(samples: Map<string, Sample[]>, rss: Map<string, number>, elapsedMs: number): void {
  const redisVersion = /v=([\d.]+)/.exec(execFileSync('redis-server', ['--version'], { encoding: 'utf8' }))?.[1]
  const postgresVersion = /(\d+\.\d+)/.exec(
    execFileSync(`${postgresBinDir()}/postgres`, ['--version'], { encoding: 'utf8' }),
  )?.[1]
  console.log(`\n## Benchmark (${new Date().toISOString().slice(0, 10)}, ${quick ? 'quick' : 'default'} run)\n`)
  console.log(
    `Machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, ${Math.round(totalmem() / 2 ** 30)} GiB; ` +
      `Node ${process.version}, Fastify ${versionOf('fastify')}, Express ${versionOf('express')}, Hono ${versionOf('hono')}, NestJS ${versionOf('@nestjs/core')} (platform-express), Koa ${versionOf('koa')}, idemkit/fetch on @hono/node-server ${versionOf('@hono/node-server')}, ` +
      `ioredis ${versionOf('ioredis')}, Redis ${redisVersion}, pg ${versionOf('pg')}, PostgreSQL ${postgresVersion} ` +
      `(fsync off, synchronous_commit on); autocannon ${CONNECTIONS} connections, ` +
      `${DURATION_S} s per run, ${ROUNDS} interleaved round(s); medians over rounds.` +
      (baselineDir === undefined ? '' : ` redis-baseline: the build of ${baselineCommit()} (${baselineDir}).`) +
      '\n',
  )
  console.log(
    '| framework | scenario | server | req/s | p50 ms | p99 ms | × bare | floor | × floor | × floor, rounds | × best peer | p99 × floor | server CPU µs/req | store CPU µs/req | store commands/req | executions/req | non-2xx | peak RSS MiB |',
  )
  console.log(
    '| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  )
  for (const framework of FRAMEWORKS) {
    for (const scenario of SCENARIOS) {
      const bare = samples.get(`${framework}/bare/${scenario}`) ?? []
      for (const mode of modesOf(framework)) {
        if (!measured(framework, mode, scenario)) continue
        const floor = samples.get(`${framework}/${floorOf(mode)}/${scenario}`) ?? []
        const runs = samples.get(`${framework}/${mode}/${scenario}`) ?? []
        // Against the best peer on the same store, round by round.
        const rivals =
          onRedisLayer(mode) || mode === 'memory'
            ? peersOf(framework, mode === 'memory' ? 'memory' : 'redis').map(
                (peer) => samples.get(`${framework}/${peer}/${scenario}`) ?? [],
              )
            : []
        const bestPeer =
          rivals.length === 0
            ? ''
            : median(
                runs.map((run, i) => run.rps / Math.max(1e-9, ...rivals.map((r) => (r[i] as Sample).rps))),
              ).toFixed(2)
        // A ratio against a server left out by `--modes` is left blank.
        const ratio = (base: Sample[], pick: (s: Sample) => number) =>
          base.length < runs.length
            ? ''
            : median(runs.map((run, i) => pick(run) / Math.max(1e-9, pick(base[i] as Sample)))).toFixed(2)
        const cells = [
          framework,
          scenario,
          mode,
          median(runs.map((r) => r.rps)).toFixed(0),
          median(runs.map((r) => r.p50)).toFixed(1),
          median(runs.map((r) => r.p99)).toFixed(1),
          ratio(bare, (s) => s.rps),
          mode === 'bare' ? '' : floorOf(mode),
          mode === 'bare' ? '' : ratio(floor, (s) => s.rps),
          mode === 'bare' || floor.length < runs.length
            ? ''
            : spread(runs.map((run, i) => run.rps / Math.max(1e-9, (floor[i] as Sample).rps))),
          bestPeer,
          mode === 'bare' ? '' : ratio(floor, (s) => s.p99),
          median(runs.map((r) => r.cpuUsPerRequest)).toFixed(0),
          median(runs.map((r) => r.storeCpuUsPerRequest)).toFixed(0),
          median(runs.map((r) => r.commandsPerRequest)).toFixed(2),
          median(runs.map((r) => r.executionsPerRequest)).toFixed(2),
          String(runs.reduce((sum, r) => sum + r.non2xx, 0)),
          ((rss.get(`${framework}/${mode}`) ?? 0) / 1024).toFixed(0),
        ]
        console.log(`| ${cells.join(' | ')} |`)
      }
    }
  }
  // The PostgreSQL store against plain statements on a table: like with like for what a write costs.
  for (const framework of FRAMEWORKS) {
    const against = (scenario: Scenario) => {
      const runs = samples.get(`${framework}/postgres/${scenario}`) ?? []
      const base = samples.get(`${framework}/pg-rows/${scenario}`) ?? []
      return runs.length === 0 || base.length < runs.length
        ? undefined
        : median(runs.map((run, i) => run.rps / Math.max(1e-9, (base[i] as Sample).rps))).toFixed(2)
    }
    const [first, replay] = [against('first'), against('replay')]
    if (first !== undefined || replay !== undefined)
      console.log(`\n${framework}: postgres × pg-rows, round by round: first ${first ?? '-'}, replay ${replay ?? '-'}.`)
  }
  const errors = [...samples.values()].flat().reduce((sum, s) => sum + s.errors, 0)
  console.log(`\nConnection errors and timeouts: ${errors}. Wall time: ${(elapsedMs / 1000).toFixed(0)} s.`)
}

await main()
