/**
 * The `idemkit/fetch` apps of the HTTP table, served under the runtime that runs this file (Bun,
 * Deno, or Node), for test/runtimes/table.test.ts, which drives them from vitest over real HTTP
 * (test/helpers/runtime-adapter.ts). vitest does not run inside Bun or Deno: this process is the
 * app's side only.
 *
 * A control server on a free port (printed as `control <port>` on stdout) starts and stops apps,
 * each on a free port of its own with a store of its own:
 *
 *   POST /apps     { kind: 'example', store, leaseMs?, waitMs? }  the Web-standard example app
 *                  { kind: 'custom', store, routes: [{ path, options }] }  test routes
 *                  -> { id, port }
 *   DELETE /apps/<id>
 *
 * `store` is `{ kind: 'memory' }` or `{ kind: 'redis', url, keyPrefix }`. A custom route's
 * handler asks the test process for its answer (`POST <CALLBACK_URL>/reply/<app>/<route>`, with
 * the request body and the handler's view): the test's own reply function runs for every
 * execution, so the test counts them. An app's log lines are posted to `<CALLBACK_URL>/logs/<app>`
 * before the response they belong to is returned, so the test reads them as soon as it has it.
 *
 * Env: CALLBACK_URL (required), IDEMPOTENCY_SECRET (required).
 */
import { Writable } from 'node:stream'
import { Redis } from 'ioredis'
import { buildFetchExampleApp } from '../../examples/fetch-app.js'
import { type FetchServer, serveFetch } from '../../examples/serve-fetch.js'
import { idempotency, idempotencyOf, type RouteOptions } from '../../plugins/fetch/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { redisStore } from '../../src/stores/redis/index.js'

const callback = process.env.CALLBACK_URL
const secret = process.env.IDEMPOTENCY_SECRET
if (!callback || !secret) throw new Error('CALLBACK_URL and IDEMPOTENCY_SECRET are required')

/** A store the control server was asked for. */
type StoreSpec =
  | { readonly kind: 'memory' }
  | { readonly kind: 'redis'; readonly url: string; readonly keyPrefix: string }

interface AppSpec {
  readonly kind: 'example' | 'custom'
  readonly store: StoreSpec
  readonly leaseMs?: number
  readonly waitMs?: number
  readonly routes?: readonly { readonly path: string; readonly options?: RouteOptions<Request> }[]
}

/** What the test process answers for one execution of a custom route. */
interface Reply {
  readonly status: number
  readonly headers?: Record<string, string>
  /** Base64, one per chunk: each is enqueued on its own tick. */
  readonly chunks: readonly string[]
}

interface App {
  readonly server: FetchServer
  close(): Promise<void>
}

const apps = new Map<number, App>()
let nextId = 1

async function storeOf(spec: StoreSpec): Promise<{ store: IdempotencyStore; close: () => Promise<void> }> {
  if (spec.kind === 'memory') {
    const store = memoryStore({ keyPrefix: 'test' })
    return { store, close: () => store.close() }
  }
  // The test suite's client settings (test/helpers/stores.ts), connected before the app answers,
  // as the suite's own clients are; a server that cannot be reached fails the ping, and stays so.
  const redis = new Redis(spec.url, { commandTimeout: 2_000, maxRetriesPerRequest: 1 })
  redis.on('error', () => {})
  await redis.ping().catch(() => undefined)
  const store = redisStore({ redis, keyPrefix: spec.keyPrefix })
  return {
    store,
    async close() {
      await store.close()
      redis.disconnect()
    },
  }
}

const post = (path: string, body: unknown) =>
  fetch(`${callback}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })

const tick = () => new Promise<void>((resolve) => setTimeout(resolve, 0))

/** The custom app: each route's handler takes its answer from the test process. */
function customApp(id: number, store: IdempotencyStore, routes: NonNullable<AppSpec['routes']>, log: Writable) {
  const idem = idempotency({
    store,
    secrets: { current: 1, keys: { 1: secret as string } },
    principal: (request) => request.headers.get('authorization') ?? undefined,
    onEvent: (event) => void log.write(`${JSON.stringify({ level: 30, idempotency: event })}\n`),
  })
  const handlers = new Map(
    routes.map((route, index) => [
      route.path,
      idem(async (request: Request) => {
        const info = idempotencyOf(request)
        const view = info && { fencingToken: info.fencingToken, replayed: info.replayed, digest: info.digest }
        const answer = (await (
          await post(`/reply/${id}/${index}`, { body: await request.json(), idempotency: view })
        ).json()) as Reply
        const chunks = answer.chunks.map((chunk) => Buffer.from(chunk, 'base64'))
        const body = new ReadableStream<Uint8Array>({
          async pull(controller) {
            const chunk = chunks.shift()
            if (chunk === undefined) return controller.close()
            await tick()
            controller.enqueue(chunk)
          },
        })
        return new Response(body, { status: answer.status, headers: { ...answer.headers } })
      }, route.options),
    ]),
  )
  return (request: Request) => {
    const handler = request.method === 'POST' ? handlers.get(new URL(request.url).pathname) : undefined
    return handler === undefined ? new Response('not found', { status: 404 }) : handler(request)
  }
}

async function startApp(spec: AppSpec): Promise<{ id: number; port: number }> {
  const id = nextId++
  const { store, close } = await storeOf(spec.store)
  const pending: string[] = []
  const log = new Writable({
    write(chunk, _encoding, done) {
      pending.push(String(chunk))
      done()
    },
  })
  const handler =
    spec.kind === 'example'
      ? buildFetchExampleApp({
          store,
          secret: secret as string,
          leaseMs: spec.leaseMs,
          waitMs: spec.waitMs,
          logger: { stream: log, level: 'info' },
        })
      : customApp(id, store, spec.routes ?? [], log)
  const server = await serveFetch(async (request) => {
    const response = await handler(request)
    // The lines this request logged reach the test before its response does.
    if (pending.length > 0) await post(`/logs/${id}`, pending.splice(0))
    return response
  }, 0)
  apps.set(id, {
    server,
    async close() {
      await server.close()
      await close()
    },
  })
  return { id, port: server.port }
}

const control = await serveFetch(async (request) => {
  const { pathname } = new URL(request.url)
  try {
    if (request.method === 'POST' && pathname === '/apps') {
      return Response.json(await startApp((await request.json()) as AppSpec))
    }
    const stop = /^\/apps\/(\d+)$/.exec(pathname)
    if (request.method === 'DELETE' && stop !== null) {
      const app = apps.get(Number(stop[1]))
      apps.delete(Number(stop[1]))
      await app?.close()
      return new Response(null, { status: 204 })
    }
    return new Response('not found', { status: 404 })
  } catch (error) {
    return new Response(String((error as Error)?.stack ?? error), { status: 500 })
  }
}, 0)

// The test process reads this line to learn where to send its requests.
console.log(`control ${control.port} ${control.runtime}`)
