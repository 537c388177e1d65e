/**
 * One server under test for `npm run bench`, in its own process.
 *
 * Env: FRAMEWORK (fastify | express | hono | nest | fetch | koa: web-frameworks.ts), MODE (bare | floor | floor-corked |
 * floor-node-redis | store | redis | memory | pg-floor | pg-rows | postgres, or a peer: node-idempotency | powertools | express-idempotency, see peers.ts), PORT,
 * REDIS_URL, DATABASE_URL (pg-floor, pg-rows, postgres; the driver migrates the table first),
 * BUSY_US (CPU burnt per request in the handler, for calibrate.ts), AUTO_PIPELINING=1,
 * COALESCE_WRITES=0, PG_POOL_MAX (the pg.Pool's size, 4), COMMAND_TIMEOUT_MS (the layer's
 * ioredis `commandTimeout`: 2000 as README.md and docs/stores.md tell users; 0 leaves it unset,
 * the `redis-no-timeout` row), REPLAY_CACHE=1 (the plugin's opt-in `replayCache: true`: the
 * `redis-cache` row; Fastify and Express), ONE_COMMAND_COMPLETION=1 (the Redis store's opt-in
 * `oneCommandCompletion: true`: the `redis-one-command` row), SWEEP_INTERVAL_MS (the PostgreSQL store's `sweepIntervalMs`:
 * 0, no sweeper, unless growth.ts asks for it).
 * - bare: the handlers alone;
 * - floor: the handlers plus the Redis round trips the idempotent route needs, as plain GETs
 *   (two for a first execution, one for a replay, a 409 or a 422): the cost of the round trips
 *   with no logic at all;
 * - floor-corked: the same GETs with the client's socket corked for the rest of each turn of the
 *   event loop, as the Redis store's `coalesceWrites` does: the floor the layer's Redis rows are
 *   compared with, like with like;
 * - floor-node-redis: the same GETs through node-redis (which batches the commands of one turn
 *   into one write by itself), the copy @node-idempotency's Redis adapter loads (node-redis 4):
 *   what the other client would cost, on the version the peer runs;
 * - store: the handlers plus the Redis store's own script calls (claim with start, complete),
 *   arguments prepared once: the design's scripted round trips without the layer around them;
 * - redis / memory / postgres: the handlers behind the idempotency layer on that store; on Redis
 *   the ioredis client is configured as README.md and docs/stores.md tell users (`commandTimeout:
 *   2000, maxRetriesPerRequest: 1, autoResendUnfulfilledCommands: false`), and the store is
 *   `verify()`d at start, as they show;
 * - pg-floor: the handlers plus as many `SELECT 1` round trips through a pg.Pool (named,
 *   prepared) as the PostgreSQL store makes: its round-trip floor;
 * - pg-rows: the same round trips as plain statements on a table of this server's own keyed by
 *   the request's key (an `INSERT ... ON CONFLICT DO NOTHING` of a row with a bytea and an
 *   indexed expiry, then an `UPDATE` of it by key; a replay one `SELECT` by key): what writing
 *   and reading a row costs PostgreSQL with no logic at all, the floor of any store on a table;
 * - a peer: the handlers behind that library, wired as its documentation shows (peers.ts).
 *
 * Routes (POST): /first (a new key per request), /replay (a few completed keys), /contention
 * (one key held by a long request: 409s), /mismatch (a completed key with another body: 422),
 * /slow (a 50 ms handler, new key per request), /wait (a 20 ms handler; the driver moves to a new
 * key every 100 ms, so most requests are duplicates of one still running: the layer's route
 * waits for it, `inFlight: { waitMs }`, where the peers answer 409). `x-hold-ms` makes a handler wait, so a run can
 * hold a key without changing the fingerprint; on Fastify `x-response-bytes: N` makes the handler
 * answer a JSON body of N bytes (growth.ts: the cost of a larger stored response). GET /__stats reports executions, CPU time, peak
 * RSS and, on PostgreSQL, the connections checked out of the pool (one per store call).
 */
import { randomBytes } from 'node:crypto'
import { createServer } from 'node:http'
import { pathToFileURL } from 'node:url'
import { Redis } from 'ioredis'
import pg from 'pg'
import { expressPeer, fastifyPeer, PEERS, type Peer } from './peers.js'
import { type BenchContext, startFetch, startKoa } from './web-frameworks.js'

const framework = process.env.FRAMEWORK ?? 'fastify'
const mode = process.env.MODE ?? 'bare'
const port = Number(process.env.PORT ?? 0)
const SECRET = 'bench-secret-bench-secret-bench-secret'

/** Round trips of the floor per route: what the idempotent route costs in Redis calls. */
const FLOOR_ROUND_TRIPS: Record<string, number> = { first: 2, replay: 1, contention: 1, mismatch: 1, slow: 2, wait: 1 }
/** The route whose duplicates wait for the first request (`inFlight`) instead of answering 409. */
const WAIT_ROUTE = { inFlight: { waitMs: 2_000 } } as const
const ROUTES = Object.keys(FLOOR_ROUND_TRIPS)

/** REPLAY_CACHE=1: the opt-in replay cache at its defaults (the `redis-cache` row); absent otherwise, so a baseline build is given no option it lacks. */
const replayCache = process.env.REPLAY_CACHE === '1' ? { replayCache: true } : {}

/** ONE_COMMAND_COMPLETION=1: the Redis store's opt-in one-command completion (the `redis-one-command` row); absent otherwise, as REPLAY_CACHE. */
const oneCommand = process.env.ONE_COMMAND_COMPLETION === '1' ? { oneCommandCompletion: true } : {}

/** COALESCE_WRITES=0 turns off the Redis store's write coalescing (`coalesceWrites`). */
const coalesceWrites = process.env.COALESCE_WRITES !== '0'

let executions = 0
const peer = mode in PEERS ? (mode as Peer) : undefined
/**
 * The layer's client (redis, store) as README.md and docs/stores.md tell users to make it;
 * COMMAND_TIMEOUT_MS=0 leaves `commandTimeout` unset (ioredis then arms no timer per command),
 * so the cost of the documented setting is measured apart. Without a `commandTimeout` the store
 * refuses `autoResendUnfulfilledCommands: false` (a call in flight at a disconnect would never
 * end), so that client leaves it at ioredis's default, which costs nothing per command. The
 * floors keep a plain client: the round trips with nothing added.
 */
const commandTimeoutMs = Number(process.env.COMMAND_TIMEOUT_MS ?? 2000)
const documented =
  commandTimeoutMs > 0
    ? { commandTimeout: commandTimeoutMs, maxRetriesPerRequest: 1, autoResendUnfulfilledCommands: false }
    : { maxRetriesPerRequest: 1 }
// AUTO_PIPELINING=1 lets ioredis batch commands of concurrent requests into one write.
const redis =
  mode === 'bare' || mode === 'floor-node-redis' || peer !== undefined || !process.env.REDIS_URL
    ? undefined
    : new Redis(process.env.REDIS_URL, {
        enableAutoPipelining: process.env.AUTO_PIPELINING === '1',
        ...(mode === 'redis' || mode === 'store' ? documented : {}),
      })
if (redis) await new Promise((resolve) => redis.once('ready', resolve))
/** Commands this server sent on its ioredis client (a script call is one): GET /__stats. */
let redisCommands = 0
if (redis) {
  const send = redis.sendCommand.bind(redis)
  redis.sendCommand = ((...args: Parameters<typeof send>) => {
    redisCommands++
    return send(...args)
  }) as typeof redis.sendCommand
}
const nodeRedis = mode === 'floor-node-redis' ? await connectNodeRedis(process.env.REDIS_URL as string) : undefined

/**
 * node-redis as @node-idempotency's Redis adapter loads it (its own dependency, `redis` 4, not
 * the `@redis/client` 6 of this package's dev dependencies), connected to `url`.
 */
async function connectNodeRedis(url: string) {
  const { createRequire } = await import('node:module')
  const fromAdapter = createRequire(createRequire(import.meta.url).resolve('@node-idempotency/storage-adapter-redis'))
  const { createClient } = fromAdapter('redis') as typeof import('@redis/client')
  const client = createClient({ url })
  client.on('error', () => undefined)
  await client.connect()
  return client
}

/** True from the cork until the `setImmediate` that uncorks (floor-corked). */
let corked = false

/** Corks the ioredis client's socket for the rest of this turn, as `coalesceWrites` does. */
function cork(client: Redis): void {
  if (corked) return
  const stream = (client as unknown as { stream?: import('node:net').Socket }).stream
  if (!stream) return
  corked = true
  stream.cork()
  setImmediate(() => {
    corked = false
    stream.uncork()
  })
}
const usesPostgres = mode === 'postgres' || mode === 'pg-floor' || mode === 'pg-rows'
// Four connections by default: on a two-core machine more backends only contend for the cores
// (docs/benchmarks.md).
const pool = usesPostgres
  ? new pg.Pool({ connectionString: process.env.DATABASE_URL, max: Number(process.env.PG_POOL_MAX ?? 4) })
  : undefined
/** Store calls on PostgreSQL: every call checks one connection out of the pool. */
let poolCheckouts = 0
pool?.on('acquire', () => poolCheckouts++)
pool?.on('error', () => undefined)

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** The handler shared by every server: counts, optionally waits, answers a small JSON body. */
/** BUSY_US (calibrate.ts): CPU each request burns in the handler, in microseconds. */
const busyUs = Number(process.env.BUSY_US ?? 0)

async function handle(route: string, holdMs: number): Promise<{ ok: true; n: number }> {
  executions++
  if (busyUs > 0) {
    const until = performance.now() + busyUs / 1000
    while (performance.now() < until) {
      // Burns CPU on purpose: the cost a layer of `busyUs` microseconds would add.
    }
  }
  if (route === 'slow') await sleep(50)
  if (route === 'wait') await sleep(20)
  if (holdMs > 0) await sleep(holdMs)
  return { ok: true, n: executions }
}

/**
 * Bodies of `x-response-bytes` (growth.ts): JSON of exactly that many bytes, made once per size,
 * padded with random base64 (a run of one letter would let PostgreSQL's TOAST compress a large
 * response to almost nothing, which a real answer does not allow).
 */
const padded = new Map<number, string>()
function paddedBody(bytes: number): string {
  let body = padded.get(bytes)
  if (body === undefined) {
    const frame = '{"ok":true,"pad":""}'
    const pad = randomBytes(bytes)
      .toString('base64')
      .slice(0, Math.max(0, bytes - frame.length))
    body = `{"ok":true,"pad":"${pad}"}`
    padded.set(bytes, body)
  }
  return body
}

async function floor(route: string, key: string): Promise<void> {
  if ((mode === 'floor' || mode === 'floor-corked') && redis) {
    for (let i = 0; i < (FLOOR_ROUND_TRIPS[route] ?? 0); i++) {
      if (mode === 'floor-corked') cork(redis)
      await redis.get(`floor:${i}`)
    }
  } else if (nodeRedis) {
    for (let i = 0; i < (FLOOR_ROUND_TRIPS[route] ?? 0); i++) await nodeRedis.get(`floor:${i}`)
  } else if (mode === 'pg-floor' && pool) {
    for (let i = 0; i < (FLOOR_ROUND_TRIPS[route] ?? 0); i++) {
      const client = await pool.connect()
      await client.query({ name: 'floor', text: 'SELECT 1' })
      client.release()
    }
  } else if (mode === 'pg-rows' && pool) {
    await rows(route, key)
  } else if (mode === 'store') {
    await scriptsOnly(key)
  }
}

/** MODE=pg-rows: this server's table (one per process: the servers start at once). */
const ROWS_TABLE = `bench_rows_${process.pid}`
if (mode === 'pg-rows' && pool) {
  await pool.query(
    `CREATE TABLE ${ROWS_TABLE} (key text PRIMARY KEY, body bytea NOT NULL, expires_at timestamptz NOT NULL)`,
  )
  await pool.query(`CREATE INDEX ON ${ROWS_TABLE} (expires_at)`)
}
const ROW_BODY = Buffer.alloc(160, 7)
/** A call on a connection of its own, as the store makes each. */
async function rowCall(name: string, text: string, values: unknown[]): Promise<{ rowCount: number | null }> {
  const client = await (pool as pg.Pool).connect()
  try {
    return await client.query({ name, text, values })
  } finally {
    client.release()
  }
}

/** MODE=pg-rows: a first execution writes the key's row, then rewrites it; anything else reads it. */
async function rows(route: string, key: string): Promise<void> {
  if ((FLOOR_ROUND_TRIPS[route] ?? 0) === 2) {
    await rowCall(
      'rows-insert',
      `INSERT INTO ${ROWS_TABLE} (key, body, expires_at) VALUES ($1, $2, now() + interval '30 s') ON CONFLICT DO NOTHING`,
      [key, ROW_BODY],
    )
    await rowCall(
      'rows-update',
      `UPDATE ${ROWS_TABLE} SET body = $2, expires_at = now() + interval '1 day' WHERE key = $1`,
      [key, ROW_BODY],
    )
    return
  }
  const read = await rowCall('rows-select', `SELECT body FROM ${ROWS_TABLE} WHERE key = $1 AND expires_at > now()`, [
    key,
  ])
  // A replayed key's row is written once, the first time it is read (not measured apart).
  if (read.rowCount === 0) {
    await (pool as pg.Pool).query(
      `INSERT INTO ${ROWS_TABLE} (key, body, expires_at) VALUES ($1, $2, now() + interval '1 day') ON CONFLICT DO NOTHING`,
      [key, ROW_BODY],
    )
  }
}

/**
 * MODE=store: the Redis store's own calls for the request (claim with start, then complete when
 * the claim was acquired), with arguments prepared once: what the design's scripted round trips
 * cost without the guard, the executor and the plugin.
 */
let scriptsOnly: (key: string) => Promise<void> = async () => {}
if (mode === 'store' && redis) {
  const core = await fromDist<typeof import('../../src/index.js')>('src/index.js')
  const store = core.redisStore({ redis, keyPrefix: 'bench', coalesceWrites })
  const owner = 'a'.repeat(64)
  const fingerprint = `f1:${'b'.repeat(64)}`
  const times = { leaseMs: 30_000, replayWindowMs: 86_400_000, failureRetentionMs: 60_000 }
  const http = await fromDist<typeof import('../../src/http/response-codec.js')>('src/http/response-codec.js')
  const body = Buffer.from(JSON.stringify({ ok: true, n: 1 }))
  const codec = http.responseCodec(['content-type', 'location'], 1 << 20)
  const response = codec.encode({ status: 201, headers: { 'content-type': 'application/json; charset=utf-8' }, body })
  scriptsOnly = async (key) => {
    const storeKey = `bench:idem:1:d1:op:${key}`
    const claim = await store.claim({
      key: storeKey,
      owner,
      fingerprint,
      operation: 'POST /route',
      codec: codec.id,
      policy: 'p1',
      start: true,
      expiredExecution: 'recover',
      ...times,
    })
    if (claim.kind === 'ACQUIRED') {
      await store.complete({ key: storeKey, owner, attempt: claim.attempt, rev: claim.rev }, response, times)
    }
  }
}

function stats() {
  const cpu = process.cpuUsage()
  return {
    executions,
    maxRssKb: process.resourceUsage().maxRSS,
    cpuUs: cpu.user + cpu.system,
    poolCheckouts,
    redisCommands,
  }
}

/**
 * The library as users get it: the compiled `dist/` (the driver builds it first), not the
 * TypeScript sources through a loader, whose per-closure helpers would cost time of their own;
 * `IDEMKIT_BENCH_DIST` names another build's `dist/` (the `redis-baseline` server).
 */
function fromDist<T>(path: string): Promise<T> {
  const dist = process.env.IDEMKIT_BENCH_DIST
  const url = dist === undefined ? new URL(`../../dist/${path}`, import.meta.url) : pathToFileURL(`${dist}${path}`)
  return import(url.href) as Promise<T>
}

async function storeFor() {
  const core = await fromDist<typeof import('../../src/index.js')>('src/index.js')
  if (mode === 'postgres' && pool)
    return core.postgresStore({ pool, keyPrefix: 'bench', sweepIntervalMs: Number(process.env.SWEEP_INTERVAL_MS ?? 0) })
  if (mode === 'redis' && redis) {
    const store = core.redisStore({ redis, keyPrefix: 'bench', coalesceWrites, ...oneCommand })
    // As the docs show; a baseline build without `verify` starts without it.
    if (typeof store.verify === 'function') await store.verify()
    return store
  }
  return core.memoryStore({ keyPrefix: 'bench' })
}

async function startFastify(): Promise<number> {
  const { default: Fastify } = await import('fastify')
  const app = Fastify({ logger: false })
  if (peer !== undefined) {
    await fastifyPeer(app, peer, process.env.REDIS_URL as string, ROUTES, handle)
    return listenFastify(app)
  }
  const protectedRoutes = mode === 'redis' || mode === 'memory' || mode === 'postgres'
  if (protectedRoutes) {
    const { default: idempotency } =
      await fromDist<typeof import('../../plugins/fastify/index.js')>('plugins/fastify/index.js')
    await app.register(idempotency, {
      store: await storeFor(),
      secrets: { current: 1, keys: { 1: SECRET } },
      anonymous: true,
      ...replayCache,
    })
  }
  for (const route of ROUTES) {
    const idempotency = route === 'wait' ? WAIT_ROUTE : true
    app.post(`/${route}`, { config: protectedRoutes ? { idempotency } : {} }, async (request, reply) => {
      await floor(route, String(request.headers['idempotency-key']))
      const body = await handle(route, Number(request.headers['x-hold-ms'] ?? 0))
      const bytes = Number(request.headers['x-response-bytes'] ?? 0)
      if (bytes > 0) return reply.code(201).type('application/json; charset=utf-8').send(paddedBody(bytes))
      return reply.code(201).send(body)
    })
  }
  return listenFastify(app)
}

async function listenFastify(app: import('fastify').FastifyInstance): Promise<number> {
  app.get('/__stats', async () => stats())
  await app.listen({ port, host: '127.0.0.1' })
  const address = app.server.address()
  return typeof address === 'object' && address ? address.port : port
}

async function startExpress(): Promise<number> {
  const { default: express } = await import('express')
  const app = express()
  app.use(express.json())
  if (peer !== undefined) {
    await expressPeer(app, peer, process.env.REDIS_URL as string, ROUTES, handle)
    return listenExpress(app)
  }
  const protectedRoutes = mode === 'redis' || mode === 'memory' || mode === 'postgres'
  const { default: idempotency } =
    await fromDist<typeof import('../../plugins/express/index.js')>('plugins/express/index.js')
  const idem = protectedRoutes
    ? idempotency({
        store: await storeFor(),
        secrets: { current: 1, keys: { 1: SECRET } },
        anonymous: true,
        ...replayCache,
      })
    : undefined
  // As the Express getting-started mounts it: the fingerprint is taken of the body as parsed.
  if (idem) app.use(idem.captureBody)
  for (const route of ROUTES) {
    const handler = async (request: import('express').Request, response: import('express').Response) => {
      await floor(route, String(request.headers['idempotency-key']))
      response.status(201).json(await handle(route, Number(request.headers['x-hold-ms'] ?? 0)))
    }
    if (idem) app.post(`/${route}`, route === 'wait' ? idem(WAIT_ROUTE) : idem(), handler)
    else app.post(`/${route}`, handler)
  }
  return listenExpress(app)
}

async function listenExpress(app: import('express').Express): Promise<number> {
  app.get('/__stats', (_request, response) => {
    response.json(stats())
  })
  const server = createServer(app)
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve))
  const address = server.address()
  return typeof address === 'object' && address ? address.port : port
}

/** Hono on @hono/node-server; its handler reads the JSON body, as the other frameworks' parsers do. */
async function startHono(): Promise<number> {
  const { Hono } = await import('hono')
  const { serve } = await import('@hono/node-server')
  const app = new Hono()
  const protectedRoutes = mode === 'redis' || mode === 'memory'
  const { idempotency } = await fromDist<typeof import('../../plugins/hono/index.js')>('plugins/hono/index.js')
  const idem = protectedRoutes
    ? idempotency({ store: await storeFor(), secrets: { current: 1, keys: { 1: SECRET } }, anonymous: true })
    : undefined
  for (const route of ROUTES) {
    const handler = async (c: import('hono').Context) => {
      await c.req.json()
      await floor(route, c.req.header('idempotency-key') ?? '')
      return c.json(await handle(route, Number(c.req.header('x-hold-ms') ?? 0)), 201)
    }
    if (idem) app.post(`/${route}`, route === 'wait' ? idem(WAIT_ROUTE) : idem(), handler)
    else app.post(`/${route}`, handler)
  }
  app.get('/__stats', (c) => c.json(stats()))
  const server = serve({ fetch: app.fetch, port, hostname: '127.0.0.1' })
  await new Promise<void>((resolve) => server.once('listening', () => resolve()))
  const address = server.address()
  return typeof address === 'object' && address ? address.port : port
}

/**
 * NestJS 12 on platform-express: one controller with a POST method per route, its decorators
 * applied as functions (the server runs under tsx, without decorator metadata).
 */
async function startNest(): Promise<number> {
  await import('reflect-metadata')
  const common = await import('@nestjs/common')
  const { NestFactory } = await import('@nestjs/core')
  const protectedRoutes = mode === 'redis' || mode === 'memory'
  const nest = await fromDist<typeof import('../../plugins/nestjs/index.js')>('plugins/nestjs/index.js')
  class BenchController {}
  const prototype = BenchController.prototype as Record<string, unknown>
  for (const route of ROUTES) {
    prototype[route] = async (request: { headers: Record<string, string | undefined> }) => {
      await floor(route, String(request.headers['idempotency-key']))
      return handle(route, Number(request.headers['x-hold-ms'] ?? 0))
    }
    common.Req()(prototype, route, 0)
    const descriptor = Object.getOwnPropertyDescriptor(prototype, route) as PropertyDescriptor
    if (protectedRoutes) nest.Idempotent(route === 'wait' ? WAIT_ROUTE : true)(prototype, route, descriptor)
    common.Post(route)(prototype, route, descriptor)
    Object.defineProperty(prototype, route, descriptor)
  }
  common.Controller()(BenchController)
  class StatsController {
    stats() {
      return stats()
    }
  }
  const statsDescriptor = Object.getOwnPropertyDescriptor(StatsController.prototype, 'stats') as PropertyDescriptor
  common.Get('__stats')(StatsController.prototype, 'stats', statsDescriptor)
  common.Controller()(StatsController)
  const imports = protectedRoutes
    ? [
        nest.IdempotencyModule.forRoot({
          store: await storeFor(),
          secrets: { current: 1, keys: { 1: SECRET } },
          anonymous: true,
        }),
      ]
    : []
  class BenchModule {}
  common.Module({ imports, controllers: [BenchController, StatsController] })(BenchModule)
  const app = await NestFactory.create(BenchModule, { logger: false })
  await app.listen(port, '127.0.0.1')
  const address = app.getHttpServer().address()
  return typeof address === 'object' && address ? address.port : port
}

/** What the servers of web-frameworks.ts take from this one. */
const context = (): BenchContext => ({
  port,
  protectedRoutes: mode === 'redis' || mode === 'memory',
  routes: ROUTES,
  waitRoute: WAIT_ROUTE,
  secret: SECRET,
  store: storeFor,
  floor,
  handle,
  stats,
  fromDist,
})

const listening =
  framework === 'fetch'
    ? await startFetch(context())
    : framework === 'koa'
      ? await startKoa(context())
      : framework === 'express'
        ? await startExpress()
        : framework === 'hono'
          ? await startHono()
          : framework === 'nest'
            ? await startNest()
            : await startFastify()
// The driver reads this line to learn the port.
console.log(`listening ${listening}`)

// Exit cleanly on SIGTERM, so `node --cpu-prof` can write its profile.
process.once('SIGTERM', () => process.exit(0))
