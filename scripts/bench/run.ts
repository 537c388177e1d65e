/**
 * `npm run bench [-- --quick] [-- --framework fastify] [-- --modes bare,pg-floor,postgres] [-- --baseline <dir>]
 * [-- --rounds 5] [-- --duration 3] [-- --no-cold] [-- --no-steps]`: the cost of idempotency against the bare route and
 * against the round-trip floor, per framework and scenario.
 * `--baseline <dir>` adds a `redis-baseline` and a `postgres-baseline` server: the layer on Redis (and on PostgreSQL) as built in another
 * checkout (its `dist/`, built there first), measured in the same interleaved rounds, so a
 * change is compared with the build before it in one run.
 *
 * Starts its own redis-server and PostgreSQL cluster on 127.0.0.1, one process per server under test, and drives each
 * with autocannon over loopback. Each server is warmed up before it is measured, until its CPU
 * per request is stable: windows of first executions and replays, at least 20,000 requests, until
 * two windows in a row agree within 10 % (at most 8 windows). Rounds are interleaved (every
 * server once per scenario, then the next round) so that drift of this machine hits all servers
 * alike; the table reports medians over rounds, and ratios computed round by round, then their
 * median. Before the warm servers start, the cold start: the first 3,000 requests of a fresh
 * process of bare, redis and each Redis peer (three fresh processes each, interleaved), as
 * autoscaling and serverless users pay them.
 * Servers (server.ts): bare, floor (plain GETs in place of the layer's round trips), store (the
 * Redis store's own script calls with nothing around them: the design's floor), redis and
 * memory (the layer on each store; on Redis with the ioredis client the docs tell users to make,
 * `commandTimeout: 2000` among its options), redis-no-timeout (the same without `commandTimeout`:
 * what the documented setting costs), redis-cache (redis with the opt-in `replayCache: true`: a
 * replay answered from the process without a claim; first executions and replays),
 * redis-one-command (redis with the opt-in `oneCommandCompletion: true`: SET ... IFEQ where the
 * server has it, a compare-and-set function elsewhere; first executions and replays), pg-floor (plain `SELECT 1` round trips through a pg.Pool in
 * place of the PostgreSQL store's calls), pg-rows (the same round trips as a plain INSERT and
 * UPDATE, or SELECT, of a row by key) and postgres (the layer on the PostgreSQL store; first
 * executions and replays). Besides req/s and latency it reports the server's and the store
 * server's CPU time per request over each whole run (the server process and redis-server from
 * /proc/<pid>/stat, or every PostgreSQL process): on a machine where
 * load generator, server and store share the cores, CPU per request is what decides the ratios.
 * After the rounds (unless `--no-steps`): what `keyFor(name)` and a recovery point cost, on the
 * PostgreSQL store's own calls (steps.ts), beside the HTTP first execution on PostgreSQL.
 * Nothing here asserts a timing: it prints figures.
 */
import { type ChildProcess, execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, totalmem } from 'node:os'
import { resolve } from 'node:path'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import pg from 'pg'
import { postgresBinDir, startPostgresServer } from '../postgres-server.js'
import { commandCalls, startRedisServer } from '../redis-server.js'
import { benchChart, type ChartRow } from './chart.js'
import { ensureBuilt, median, option, postgresCpuUs, processCpuUs, startBenchServer } from './common.js'
import { PEER_STORE, PEERS, type Peer } from './peers.js'
import { roundsFigure, stepCosts } from './steps.js'

const args = process.argv.slice(2)
const quick = args.includes('--quick')
const onlyFramework = args.includes('--framework') ? args[args.indexOf('--framework') + 1] : undefined
/** Where the SVG chart per framework goes (`bench-<framework>.svg`). */
const chartsDir = args.includes('--charts') ? (args[args.indexOf('--charts') + 1] as string) : '.bench'
/** `--baseline <dir>`: another checkout whose `dist/` the `redis-baseline` server loads. */
const baselineDir = args.includes('--baseline') ? resolve(args[args.indexOf('--baseline') + 1] as string) : undefined
/** `--rounds R`: interleaved rounds (5; 1 with `--quick`). */
const ROUNDS = Number(option('--rounds', quick ? '1' : '5'))
/** `--duration S`: seconds per server, scenario and round (3; 0.3 with `--quick`). */
const DURATION_S = Number(option('--duration', quick ? '0.3' : '3'))
const CONNECTIONS = 32
/**
 * Warm-up: windows of WARMUP_WINDOW first executions then as many replays, until the server has
 * served WARMUP_MIN_REQUESTS and its CPU per request in both agrees with the window before
 * within WARMUP_STABLE (at most WARMUP_MAX_WINDOWS windows); then every other scenario it runs
 * once for WARMUP_S.
 */
const WARMUP_WINDOW = quick ? 1_000 : 4_000
const WARMUP_MIN_REQUESTS = quick ? 2_000 : 20_000
const WARMUP_STABLE = 0.1
const WARMUP_MAX_WINDOWS = quick ? 3 : 8
const WARMUP_S = quick ? 0.3 : 1
/** Cold start: the first COLD_REQUESTS requests of a fresh process, COLD_STARTS processes per server and scenario. */
const COLD_REQUESTS = quick ? 1_000 : 3_000
const COLD_STARTS = quick ? 1 : 3
/** `--no-cold`: leave the cold start out. */
const cold = !args.includes('--no-cold')
/** `--no-steps`: leave out what a derived key and a recovery point cost (steps.ts). */
const stepsToo = !args.includes('--no-steps')
/** The store calls of a first execution with and without a step: operations of each in all, connections. */
const STEP_OPERATIONS = quick ? 1_500 : 6_000
const STEP_CONCURRENCY = 32
/** The servers whose cold start is measured: the layer on Redis against the Redis peers, the bare route for scale. */
const COLD_MODES: readonly string[] = ['bare', 'redis', 'node-idempotency', 'powertools', 'express-idempotency']
/** The peer the cold start and the summary are against. */
const PEER: Peer = 'node-idempotency'

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
  'redis-no-timeout',
  'redis-cache',
  'redis-one-command',
  'redis-baseline',
  'memory',
  'pg-floor',
  'pg-rows',
  'postgres',
  'postgres-baseline',
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
    .filter((mode) => !isBaseline(mode) || baselineDir !== undefined)
/** A peer's records and ours on the same store are compared: redis with Redis peers, memory with in-memory ones. */
const peersOf = (framework: string, store: 'redis' | 'memory'): Peer[] =>
  modesOf(framework).filter((mode): mode is Peer => isPeer(mode) && PEER_STORE[mode] === store)
const SCENARIOS = ['first', 'replay', 'contention', 'wait', 'mismatch', 'slow'] as const
type Scenario = (typeof SCENARIOS)[number]
/** `--scenarios first,replay`: only these scenarios. */
const onlyScenarios = args.includes('--scenarios')
  ? new Set(args[args.indexOf('--scenarios') + 1]?.split(','))
  : undefined
/**
 * The `store` server (the store's own script calls, no layer around them) and the node-redis
 * floor are measured where they tell something new: a first execution (claim + complete) and a
 * replay (one claim).
 */
const measured = (framework: string, mode: Mode, scenario: Scenario) =>
  (onlyScenarios === undefined || onlyScenarios.has(scenario)) &&
  ((FULL_FRAMEWORKS.has(framework) &&
    mode !== 'store' &&
    mode !== 'floor-node-redis' &&
    mode !== 'redis-no-timeout' &&
    mode !== 'redis-cache' &&
    mode !== 'redis-one-command' &&
    !onPostgres(mode)) ||
    scenario === 'first' ||
    scenario === 'replay')
/**
 * The floor a row's `× floor` is against: pg-floor for PostgreSQL; for the layer's Redis rows
 * (redis, store) the floor with the same write batching as the store (`coalesceWrites`: the
 * socket corked per turn of the event loop); the plain floor for the rest, the peers among them.
 */
const floorOf = (mode: Mode): Mode =>
  onPostgres(mode) ? 'pg-floor' : onRedisLayer(mode) || mode === 'store' ? 'floor-corked' : 'floor'
/** The layer on Redis: this build's (with the documented client, or without `commandTimeout`), or the baseline's. */
const onRedisLayer = (mode: Mode) =>
  mode === 'redis' ||
  mode === 'redis-no-timeout' ||
  mode === 'redis-cache' ||
  mode === 'redis-one-command' ||
  mode === 'redis-baseline'
/** The servers that load another checkout's build (`--baseline`). */
const isBaseline = (mode: Mode) => mode === 'redis-baseline' || mode === 'postgres-baseline'
/** The modes whose store is PostgreSQL: their floor is pg-floor, their store CPU PostgreSQL's. */
const onPostgres = (mode: Mode) =>
  mode === 'postgres' || mode === 'postgres-baseline' || mode === 'pg-floor' || mode === 'pg-rows'

/** The stores a server talks to, for its figures. */
interface Stores {
  readonly redis: Redis
  readonly redisUrl: string
  readonly redisPid: number
  readonly postgresUrl: string
  readonly postgresPid: number
}

interface Server {
  readonly framework: string
  readonly mode: Mode
  readonly url: string
  readonly child: ChildProcess
  readonly pid: number
}

interface Sample {
  readonly rps: number
  readonly p50: number
  readonly p99: number
  readonly commandsPerRequest: number
  readonly executionsPerRequest: number
  /** The server process's own CPU time per request (user + system, /proc), in microseconds. */
  readonly cpuUsPerRequest: number
  /**
   * The store server's CPU time per request, in microseconds: redis-server's (user + system,
   * /proc), or every PostgreSQL process's for the PostgreSQL modes.
   */
  readonly storeCpuUsPerRequest: number
  readonly non2xx: number
  readonly errors: number
  /** Requests served. */
  readonly requests: number
  /** Wall time of the run, in milliseconds. */
  readonly wallMs: number
}

const BODY = JSON.stringify({ item: 'book', qty: 1 })
const OTHER_BODY = JSON.stringify({ item: 'pen', qty: 2 })

async function startServer(framework: string, mode: Mode, stores: Stores): Promise<Server> {
  const started = await startBenchServer({
    FRAMEWORK: framework,
    MODE: onRedisLayer(mode) ? 'redis' : mode === 'postgres-baseline' ? 'postgres' : mode,
    REDIS_URL: stores.redisUrl,
    DATABASE_URL: stores.postgresUrl,
    ...(isBaseline(mode) ? { IDEMKIT_BENCH_DIST: `${baselineDir}/dist/` } : {}),
    ...(mode === 'redis-no-timeout' ? { COMMAND_TIMEOUT_MS: '0' } : {}),
    ...(mode === 'redis-cache' ? { REPLAY_CACHE: '1' } : {}),
    ...(mode === 'redis-one-command' ? { ONE_COMMAND_COMPLETION: '1' } : {}),
  })
  return { framework, mode, ...started, pid: started.child.pid as number }
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
  onPostgres(mode) ? postgresCpuUs(stores.postgresPid) : processCpuUs(stores.redisPid)

/** How long a run lasts: seconds, or a number of requests. */
type Load = { readonly durationS: number } | { readonly amount: number }

async function measure(
  server: Server,
  scenario: Scenario,
  round: number,
  stores: Stores,
  load: Load = { durationS: DURATION_S },
  counters = true,
): Promise<Sample> {
  const durationS = 'durationS' in load ? load.durationS : 1
  const { url, body, nextKey, hold } = await prepare(server, scenario, round, durationS)
  // The server's own counters are read through a request (GET /__stats): a cold start leaves them out.
  const beforeStats = counters ? await serverStats(server) : undefined
  const beforeTrips = counters ? await roundTrips(stores, server) : 0
  // CPU is read from /proc right around the run, so nothing the driver asks falls inside it.
  const beforeStoreCpu = storeCpuUs(stores, server.mode)
  const beforeCpu = processCpuUs(server.pid)
  const started = performance.now()
  const result = await autocannon({
    url,
    connections: CONNECTIONS,
    ...('amount' in load ? { amount: load.amount } : { duration: load.durationS }),
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
  const wallMs = performance.now() - started
  const afterCpu = processCpuUs(server.pid)
  const afterStoreCpu = storeCpuUs(stores, server.mode)
  const afterTrips = counters ? await roundTrips(stores, server) : 0
  const afterStats = counters ? await serverStats(server) : undefined
  await hold
  const requests = Math.max(1, result.requests.total)
  return {
    rps: result.requests.total / Math.max(0.001, result.duration),
    p50: result.latency.p50,
    p99: result.latency.p99,
    commandsPerRequest: (afterTrips - beforeTrips) / requests,
    executionsPerRequest: ((afterStats?.executions ?? 0) - (beforeStats?.executions ?? 0)) / requests,
    cpuUsPerRequest: (afterCpu - beforeCpu) / requests,
    storeCpuUsPerRequest: (afterStoreCpu - beforeStoreCpu) / requests,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    requests: result.requests.total,
    wallMs,
  }
}

/** How a server's warm-up went: requests served, and its CPU per request in its last two windows. */
interface WarmUp {
  readonly requests: number
  readonly windows: number
  /** CPU µs per request of the last two windows, first executions then replays: `[before, last]`. */
  readonly first: readonly [number, number]
  readonly replay: readonly [number, number]
  readonly stable: boolean
}

/** Two CPU figures agree within WARMUP_STABLE. */
const agree = (a: number, b: number) => Math.abs(a - b) <= WARMUP_STABLE * Math.max(1e-9, Math.min(a, b))

/**
 * Warms `server` up until its CPU per request is stable (WARMUP_* above), then runs each other
 * scenario it is measured in once, so the rounds measure a process whose paths are compiled.
 */
async function warmUp(server: Server, stores: Stores): Promise<WarmUp> {
  let requests = 0
  let windows = 0
  let first: [number, number] = [0, 0]
  let replay: [number, number] = [0, 0]
  let stable = false
  while (windows < WARMUP_MAX_WINDOWS) {
    const a = await measure(server, 'first', -1, stores, { amount: WARMUP_WINDOW }, false)
    const b = await measure(server, 'replay', -1, stores, { amount: WARMUP_WINDOW }, false)
    windows++
    requests += a.requests + b.requests
    first = [first[1], a.cpuUsPerRequest]
    replay = [replay[1], b.cpuUsPerRequest]
    stable = windows > 1 && agree(...first) && agree(...replay)
    if (requests >= WARMUP_MIN_REQUESTS && stable) break
  }
  for (const scenario of SCENARIOS) {
    if (scenario === 'first' || scenario === 'replay' || !measured(server.framework, server.mode, scenario)) continue
    requests += (await measure(server, scenario, -1, stores, { durationS: WARMUP_S }, false)).requests
  }
  return { requests, windows, first, replay, stable }
}

/** One cold start: the first COLD_REQUESTS requests a fresh process served. */
async function coldStart(framework: string, mode: Mode, scenario: Scenario, start: number, stores: Stores) {
  const server = await startServer(framework, mode, stores)
  try {
    return await measure(server, scenario, -100 - start, stores, { amount: COLD_REQUESTS }, false)
  } finally {
    server.child.kill('SIGKILL')
    await new Promise((resolve) => (server.child.exitCode === null ? server.child.once('exit', resolve) : resolve(0)))
  }
}

/**
 * Cold starts of COLD_MODES on the frameworks the peers are wired for, first executions and
 * replays: COLD_STARTS fresh processes each, interleaved (start i of every server, then start
 * i + 1). A replay's process first writes the 8 keys it replays (8 requests before the count).
 */
async function coldStarts(stores: Stores): Promise<Map<string, Sample[]>> {
  const samples = new Map<string, Sample[]>()
  if (!cold) return samples
  for (let start = 0; start < COLD_STARTS; start++) {
    for (const framework of FRAMEWORKS.filter((name) => FULL_FRAMEWORKS.has(name))) {
      for (const scenario of ['first', 'replay'] as const) {
        for (const mode of modesOf(framework).filter((m) => COLD_MODES.includes(m))) {
          const id = `${framework}/${mode}/${scenario}`
          samples.set(id, [...(samples.get(id) ?? []), await coldStart(framework, mode, scenario, start, stores)])
        }
      }
    }
  }
  return samples
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

/** The 1-minute load average when the run started (`uptime`'s first figure). */
let loadAtStart = 0

async function main(): Promise<void> {
  const started = Date.now()
  loadAtStart = loadavg()[0] as number
  // The servers load the compiled package, as users run it: build it unless it is up to date.
  ensureBuilt()
  const [redisServer, postgresServer] = await Promise.all([startRedisServer(), startPostgresServer()])
  const redis = new Redis(redisServer.url)
  const stores: Stores = {
    redis,
    redisUrl: redisServer.url,
    redisPid: redisServer.pid,
    postgresUrl: postgresServer.url,
    postgresPid: postgresServer.pid,
  }
  const servers: Server[] = []
  try {
    const pool = new pg.Pool({ connectionString: postgresServer.url, max: 1 })
    const core = await import(new URL('../../dist/src/index.js', import.meta.url).href)
    await core.postgresStore({ pool, sweepIntervalMs: 0 }).migrate()
    await pool.end()
    // Cold starts first, each on a fresh process, while no warm server is up.
    const colds = await coldStarts(stores)
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
    // Warm-up, not measured: each server until its CPU per request is stable, so the rounds
    // measure a process whose paths the JIT has compiled, as a server that runs for hours is.
    const warmUps = new Map<string, WarmUp>()
    for (const server of servers) warmUps.set(`${server.framework}/${server.mode}`, await warmUp(server, stores))
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
    printWarm(warmUps)
    printAgainstPeer(samples)
    printCold(colds, samples)
    if (stepsToo) await printSteps(core, postgresServer, samples)
    writeCharts(samples)
  } finally {
    for (const server of servers) server.child.kill('SIGKILL')
    redis.disconnect()
    await Promise.all([redisServer.stop(), postgresServer.stop()])
  }
}

/**
 * What `keyFor` and a recovery point cost (steps.ts), on the PostgreSQL cluster of the HTTP
 * rounds after they ended, beside the layer's first execution on PostgreSQL over HTTP.
 */
async function printSteps(
  core: typeof import('../../src/index.js'),
  postgresServer: { url: string; pid: number },
  samples: Map<string, Sample[]>,
): Promise<void> {
  const pool = new pg.Pool({ connectionString: postgresServer.url, max: 4 })
  pool.on('error', () => undefined)
  const store = core.postgresStore({ pool, sweepIntervalMs: 0 })
  try {
    const { keyForUs, rows } = await stepCosts(core, store, postgresServer.pid, {
      operations: STEP_OPERATIONS,
      rounds: ROUNDS,
      concurrency: STEP_CONCURRENCY,
    })
    console.log(
      `\nWhat a derived key and a recovery point cost: keyFor(name) of a new name ${keyForUs.toFixed(2)} µs of CPU ` +
        `(a name asked again in a run is a Map look-up). The PostgreSQL store's calls of a first execution without HTTP ` +
        `(pg.Pool max 4, ${STEP_CONCURRENCY} at once, ${STEP_OPERATIONS} of each, cases taking turns over ${ROUNDS} round(s); ` +
        `median (lowest-highest)); a step's cost is the third row less the second:\n`,
    )
    console.log('| store calls | ops/s | PostgreSQL CPU µs/op | client CPU µs/op |')
    console.log('| --- | ---: | ---: | ---: |')
    for (const [name, runs] of rows) {
      const column = (i: number) => roundsFigure(runs.map((row) => row[i] as number))
      console.log(`| ${name} | ${column(0)} | ${column(1)} | ${column(2)} |`)
    }
    const [, plain, step] = [...rows.values()]
    if (plain !== undefined && step !== undefined) {
      const added = (i: number) =>
        roundsFigure(
          step.map((row, r) => (row[i] as number) - ((plain[r] as number[])[i] as number)),
          1,
        )
      console.log(`| one step added | | ${added(1)} | ${added(2)} |`)
    }
    for (const framework of FRAMEWORKS) {
      const http = samples.get(`${framework}/postgres/first`)
      if (http === undefined || http.length === 0) continue
      console.log(
        `\nBeside it, ${framework} on PostgreSQL over HTTP, first execution: server CPU ${roundsFigure(http.map((s) => s.cpuUsPerRequest))} µs/req, ` +
          `PostgreSQL CPU ${roundsFigure(http.map((s) => s.storeCpuUsPerRequest))} µs/req.`,
      )
    }
  } finally {
    await store.close()
    await pool.end()
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
  // `redis-server --version` names the server: "Redis server v=7.0.15 …" or "Valkey server v=8.1.1 …".
  const redisServer = /^(\w+) server v=([\d.]+)/.exec(execFileSync('redis-server', ['--version'], { encoding: 'utf8' }))
  const redisVersion = redisServer === null ? 'Redis ?' : `${redisServer[1]} ${redisServer[2]}`
  const postgresVersion = /(\d+\.\d+)/.exec(
    execFileSync(`${postgresBinDir()}/postgres`, ['--version'], { encoding: 'utf8' }),
  )?.[1]
  console.log(`\n## Benchmark (${new Date().toISOString().slice(0, 10)}, ${quick ? 'quick' : 'default'} run)\n`)
  console.log(
    `Machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, ${Math.round(totalmem() / 2 ** 30)} GiB; ` +
      `Node ${process.version}, Fastify ${versionOf('fastify')}, Express ${versionOf('express')}, Hono ${versionOf('hono')}, NestJS ${versionOf('@nestjs/core')} (platform-express), Koa ${versionOf('koa')}, idemkit/fetch on @hono/node-server ${versionOf('@hono/node-server')}, ` +
      `ioredis ${versionOf('ioredis')}, ${redisVersion}, pg ${versionOf('pg')}, PostgreSQL ${postgresVersion} ` +
      `(fsync off, synchronous_commit on); autocannon ${CONNECTIONS} connections, ` +
      `each server warmed up until its CPU per request was stable (at least ${WARMUP_MIN_REQUESTS} requests), ` +
      `${DURATION_S} s per run, ${ROUNDS} interleaved round(s); medians over rounds. ` +
      `Load average (1 min) ${loadAtStart.toFixed(1)} at the start, ${(loadavg()[0] as number).toFixed(1)} at the end.` +
      (baselineDir === undefined
        ? ''
        : ` redis-baseline, postgres-baseline: the build of ${baselineCommit()} (${baselineDir}).`) +
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
  // This build against the baseline's, round by round: a change's cost beside the rounds' spread.
  for (const framework of FRAMEWORKS) {
    for (const store of ['redis', 'postgres'] as const) {
      const cells = SCENARIOS.flatMap((scenario) => {
        const runs = samples.get(`${framework}/${store}/${scenario}`) ?? []
        const base = samples.get(`${framework}/${store}-baseline/${scenario}`) ?? []
        if (runs.length === 0 || base.length < runs.length) return []
        const rps = perRound(runs, base, (s) => s.rps)
        const cpu = perRound(runs, base, (s) => s.cpuUsPerRequest)
        const storeCpu = perRound(runs, base, (s) => s.storeCpuUsPerRequest)
        return [`${scenario} req/s ${withRange(rps)}, CPU/req ${withRange(cpu)}, store CPU/req ${withRange(storeCpu)}`]
      })
      if (cells.length > 0)
        console.log(
          `\n${framework}: ${store} × ${store}-baseline, round by round (median, min-max): ${cells.join('; ')}.`,
        )
    }
  }
  const errors = [...samples.values()].flat().reduce((sum, s) => sum + s.errors, 0)
  console.log(`\nConnection errors and timeouts: ${errors}. Wall time: ${(elapsedMs / 1000).toFixed(0)} s.`)
}

/**
 * `a / b` per round, or undefined where a round's `b` is 0 (a store CPU below /proc's tick over
 * a short run): no ratio is printed then.
 */
function perRound(runs: readonly Sample[], base: readonly Sample[], pick: (s: Sample) => number): number[] {
  const ratios = runs.map((run, i) => pick(run) / pick(base[i] as Sample))
  return ratios.every(Number.isFinite) ? ratios : []
}

/** Medians and the range of per-round values, e.g. `0.91 (0.80-1.02)`. */
const withRange = (values: number[], digits = 2) =>
  values.length === 0 ? '' : `${median(values).toFixed(digits)} (${spread(values)})`

/** How each server's warm-up went. */
function printWarm(warmUps: Map<string, WarmUp>): void {
  console.log(
    `\nWarm-up: windows of ${WARMUP_WINDOW} first executions and ${WARMUP_WINDOW} replays until at least ${WARMUP_MIN_REQUESTS} requests and two windows in a row within ${WARMUP_STABLE * 100} % of each other in server CPU per request (at most ${WARMUP_MAX_WINDOWS} windows), then the other scenarios ${WARMUP_S} s each.\n`,
  )
  console.log(
    '| framework | server | requests | windows | first: CPU µs/req, last two windows | replay: same | stable |',
  )
  console.log('| --- | --- | ---: | ---: | ---: | ---: | --- |')
  for (const [id, warm] of warmUps) {
    const [framework, mode] = id.split('/')
    const pair = ([a, b]: readonly [number, number]) => `${a.toFixed(0)} → ${b.toFixed(0)}`
    console.log(
      `| ${framework} | ${mode} | ${warm.requests} | ${warm.windows} | ${pair(warm.first)} | ${pair(warm.replay)} | ${warm.stable ? 'yes' : 'no'} |`,
    )
  }
}

/**
 * The layer on Redis against @node-idempotency, round by round (req/s, server and Redis CPU per
 * request), and what the documented `commandTimeout` costs (redis against redis-no-timeout).
 */
function printAgainstPeer(samples: Map<string, Sample[]>): void {
  const rows: string[] = []
  const costs: string[] = []
  for (const framework of FRAMEWORKS) {
    const modes = modesOf(framework)
    if (!modes.includes(PEER)) continue
    for (const scenario of SCENARIOS) {
      const peer = samples.get(`${framework}/${PEER}/${scenario}`) ?? []
      for (const mode of modes.filter(onRedisLayer)) {
        const runs = samples.get(`${framework}/${mode}/${scenario}`) ?? []
        if (runs.length === 0 || peer.length < runs.length) continue
        const ratios = (pick: (s: Sample) => number) => perRound(runs, peer, pick)
        const cpu = (pick: (s: Sample) => number) =>
          `${median(runs.map(pick)).toFixed(0)} / ${median(peer.map(pick)).toFixed(0)}`
        rows.push(
          `| ${framework} | ${scenario} | ${mode} | ${withRange(ratios((s) => s.rps))} | ${cpu((s) => s.cpuUsPerRequest)} | ${withRange(ratios((s) => s.cpuUsPerRequest))} | ${cpu((s) => s.storeCpuUsPerRequest)} | ${withRange(ratios((s) => s.storeCpuUsPerRequest))} | ${withRange(ratios((s) => s.cpuUsPerRequest + s.storeCpuUsPerRequest))} |`,
        )
      }
      const timed = samples.get(`${framework}/redis/${scenario}`) ?? []
      const untimed = samples.get(`${framework}/redis-no-timeout/${scenario}`) ?? []
      if (timed.length > 0 && untimed.length === timed.length) {
        const rps = timed.map((run, i) => run.rps / Math.max(1e-9, (untimed[i] as Sample).rps))
        const diff = (pick: (s: Sample) => number) => timed.map((run, i) => pick(run) - pick(untimed[i] as Sample))
        costs.push(
          `| ${framework} | ${scenario} | ${withRange(rps)} | ${median(timed.map((s) => s.cpuUsPerRequest)).toFixed(0)} / ${median(untimed.map((s) => s.cpuUsPerRequest)).toFixed(0)} | ${withRange(
            diff((s) => s.cpuUsPerRequest),
            1,
          )} | ${withRange(
            diff((s) => s.storeCpuUsPerRequest),
            1,
          )} |`,
        )
      }
    }
  }
  if (rows.length > 0) {
    console.log(`\nAgainst ${PEER}, round by round (median, lowest-highest of the rounds):\n`)
    console.log(
      `| framework | scenario | server | req/s × peer | server CPU µs/req (this / peer) | × peer | Redis CPU µs/req (this / peer) | × peer | server + Redis CPU × peer |`,
    )
    console.log('| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |')
    for (const row of rows) console.log(row)
  }
  if (costs.length > 0) {
    console.log(
      '\nWhat the documented `commandTimeout: 2000` costs: redis (the client as the docs make it) against redis-no-timeout (the same without it), round by round:\n',
    )
    console.log(
      '| framework | scenario | req/s × without | server CPU µs/req (with / without) | server CPU µs/req added | Redis CPU µs/req added |',
    )
    console.log('| --- | --- | ---: | ---: | ---: | ---: |')
    for (const row of costs) console.log(row)
  }
}

/** The cold starts, against the peer's, start by start, beside the warm figures of the same run. */
function printCold(colds: Map<string, Sample[]>, samples: Map<string, Sample[]>): void {
  if (colds.size === 0) return
  console.log(
    `\nCold start: the first ${COLD_REQUESTS} requests of a fresh process (${COLD_STARTS} process(es) per row, interleaved; medians, and ratios to ${PEER} start by start), beside the same server's warm CPU per request in the rounds above:\n`,
  )
  console.log(
    `| framework | scenario | server | server CPU µs/req | Redis CPU µs/req | wall ms | × ${PEER}, server CPU | × ${PEER}, server + Redis CPU | × ${PEER}, wall | warm server CPU µs/req | cold ÷ warm |`,
  )
  console.log('| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
  for (const [id, runs] of colds) {
    const [framework, mode, scenario] = id.split('/') as [string, Mode, Scenario]
    const peer = colds.get(`${framework}/${PEER}/${scenario}`) ?? []
    const ratio = (pick: (s: Sample) => number) =>
      peer.length < runs.length ? '' : withRange(perRound(runs, peer, pick))
    const warm = samples.get(`${framework}/${mode}/${scenario}`) ?? []
    const coldCpu = median(runs.map((r) => r.cpuUsPerRequest))
    const warmCpu = warm.length === 0 ? undefined : median(warm.map((r) => r.cpuUsPerRequest))
    console.log(
      `| ${framework} | ${scenario} | ${mode} | ${coldCpu.toFixed(0)} | ${median(runs.map((r) => r.storeCpuUsPerRequest)).toFixed(0)} | ${median(runs.map((r) => r.wallMs)).toFixed(0)} | ${ratio((s) => s.cpuUsPerRequest)} | ${ratio((s) => s.cpuUsPerRequest + s.storeCpuUsPerRequest)} | ${ratio((s) => s.wallMs)} | ${warmCpu?.toFixed(0) ?? ''} | ${warmCpu === undefined ? '' : (coldCpu / warmCpu).toFixed(2)} |`,
    )
  }
}

await main()
