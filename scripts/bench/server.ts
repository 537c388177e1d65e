/**
 * One server under test for `npm run bench`, in its own process.
 *
 * Env: FRAMEWORK (fastify | express), MODE (bare | floor | redis | memory), PORT, REDIS_URL.
 * - bare: the handlers alone;
 * - floor: the handlers plus the Redis round trips the idempotent route needs, as plain GETs
 *   (two for a first execution, one for a replay, a 409 or a 422): the cost of the round trips
 *   with no logic at all;
 * - redis / memory: the handlers behind the idempotency layer on that store.
 *
 * Routes (POST): /first (a new key per request), /replay (a few completed keys), /contention
 * (one key held by a long request: 409s), /mismatch (a completed key with another body: 422),
 * /slow (a 50 ms handler, new key per request). `x-hold-ms` makes a handler wait, so a run can
 * hold a key without changing the fingerprint. GET /__stats reports executions, CPU time and
 * peak RSS.
 */
import { createServer } from 'node:http'
import { Redis } from 'ioredis'

const framework = process.env.FRAMEWORK ?? 'fastify'
const mode = process.env.MODE ?? 'bare'
const port = Number(process.env.PORT ?? 0)
const SECRET = 'bench-secret-bench-secret-bench-secret'

/** Round trips of the floor per route: what the idempotent route costs in Redis calls. */
const FLOOR_ROUND_TRIPS: Record<string, number> = { first: 2, replay: 1, contention: 1, mismatch: 1, slow: 2 }
const ROUTES = Object.keys(FLOOR_ROUND_TRIPS)

let executions = 0
// AUTO_PIPELINING=1 lets ioredis batch commands of concurrent requests into one write.
const redis =
  mode === 'bare' || !process.env.REDIS_URL
    ? undefined
    : new Redis(process.env.REDIS_URL, { enableAutoPipelining: process.env.AUTO_PIPELINING === '1' })
if (redis) await new Promise((resolve) => redis.once('ready', resolve))

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** The handler shared by every server: counts, optionally waits, answers a small JSON body. */
async function handle(route: string, holdMs: number): Promise<{ ok: true; n: number }> {
  executions++
  if (route === 'slow') await sleep(50)
  if (holdMs > 0) await sleep(holdMs)
  return { ok: true, n: executions }
}

async function floor(route: string): Promise<void> {
  if (mode !== 'floor' || !redis) return
  for (let i = 0; i < (FLOOR_ROUND_TRIPS[route] ?? 0); i++) await redis.get(`floor:${i}`)
}

function stats() {
  const cpu = process.cpuUsage()
  return { executions, maxRssKb: process.resourceUsage().maxRSS, cpuUs: cpu.user + cpu.system }
}

/**
 * The library as users get it: the compiled `dist/` (the driver builds it first), not the
 * TypeScript sources through a loader, whose per-closure helpers would cost time of their own.
 */
function fromDist<T>(path: string): Promise<T> {
  return import(new URL(`../../dist/${path}`, import.meta.url).href) as Promise<T>
}

async function storeFor() {
  const core = await fromDist<typeof import('../../src/index.js')>('src/index.js')
  return mode === 'redis' && redis ? core.redisStore({ redis, keyPrefix: 'bench' }) : core.memoryStore({ keyPrefix: 'bench' })
}

async function startFastify(): Promise<number> {
  const { default: Fastify } = await import('fastify')
  const app = Fastify({ logger: false })
  const protectedRoutes = mode === 'redis' || mode === 'memory'
  if (protectedRoutes) {
    const { default: idempotency } = await fromDist<typeof import('../../plugins/fastify/index.js')>('plugins/fastify/index.js')
    await app.register(idempotency, { store: await storeFor(), secrets: { current: 1, keys: { 1: SECRET } }, anonymous: true })
  }
  for (const route of ROUTES) {
    app.post(`/${route}`, { config: protectedRoutes ? { idempotency: true } : {} }, async (request, reply) => {
      await floor(route)
      const body = await handle(route, Number(request.headers['x-hold-ms'] ?? 0))
      return reply.code(201).send(body)
    })
  }
  app.get('/__stats', async () => stats())
  await app.listen({ port, host: '127.0.0.1' })
  const address = app.server.address()
  return typeof address === 'object' && address ? address.port : port
}

async function startExpress(): Promise<number> {
  const { default: express } = await import('express')
  const app = express()
  app.use(express.json())
  const protectedRoutes = mode === 'redis' || mode === 'memory'
  const { default: idempotency } = await fromDist<typeof import('../../plugins/express/index.js')>('plugins/express/index.js')
  const idem = protectedRoutes
    ? idempotency({ store: await storeFor(), secrets: { current: 1, keys: { 1: SECRET } }, anonymous: true })
    : undefined
  for (const route of ROUTES) {
    const handler = async (request: import('express').Request, response: import('express').Response) => {
      await floor(route)
      response.status(201).json(await handle(route, Number(request.headers['x-hold-ms'] ?? 0)))
    }
    if (idem) app.post(`/${route}`, idem(), handler)
    else app.post(`/${route}`, handler)
  }
  app.get('/__stats', (_request, response) => {
    response.json(stats())
  })
  const server = createServer(app)
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve))
  const address = server.address()
  return typeof address === 'object' && address ? address.port : port
}

const listening = framework === 'express' ? await startExpress() : await startFastify()
// The driver reads this line to learn the port.
console.log(`listening ${listening}`)

// Exit cleanly on SIGTERM, so `node --cpu-prof` can write its profile.
process.once('SIGTERM', () => process.exit(0))
