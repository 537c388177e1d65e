/**
 * The HTTP adapters (Fastify, Express, Hono, NestJS, Web-standard handlers, Koa) behind one interface, for suites that run
 * unchanged against every one of them (ADAPTERS): the example app of each framework, or a small
 * app with test routes, listening on a free 127.0.0.1 port; plus an HTTP client (undici's fetch)
 * and a raw-socket client for requests fetch refuses to send (a header on two lines, a control
 * byte in a header).
 */
import { createServer, type Server } from 'node:http'
import { connect } from 'node:net'
import { Readable, Writable } from 'node:stream'
import { getRequestListener } from '@hono/node-server'
import { bodyParser } from '@koa/bodyparser'
import Router from '@koa/router'
import express from 'express'
import express4 from 'express4'
import Fastify, { type FastifyRequest } from 'fastify'
import fastify4 from 'fastify4'
import { type Context, Hono } from 'hono'
import { getRequestListener as getRequestListenerV1 } from 'hono-node-server1'
import Koa from 'koa'
import { buildExpressExampleApp } from '../../examples/express-app.js'
import { buildExampleApp } from '../../examples/fastify-app.js'
import { buildFetchExampleApp } from '../../examples/fetch-app.js'
import { buildHonoExampleApp } from '../../examples/hono-app.js'
import { buildKoaExampleApp } from '../../examples/koa-app.js'
import { buildNestExampleApp, type NestPlatform } from '../../examples/nest-app.js'
import { idempotency as expressIdempotency } from '../../plugins/express/index.js'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { idempotency as fetchIdempotency, idempotencyOf } from '../../plugins/fetch/index.js'
import { type HonoIdempotencyEnv, idempotency as honoIdempotency } from '../../plugins/hono/index.js'
import { type KoaIdempotencyState, idempotency as koaIdempotency } from '../../plugins/koa/index.js'
import type { NestRequest } from '../../plugins/nestjs/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import type { IdempotencyInfo } from '../../src/http/guard.js'
import type { RouteOptions } from '../../src/http/route-options.js'
import { nestTestApp } from '../nestjs/nest-test-app.js'
import { SECRET } from './example-app.js'

/** A listening app. */
export interface RunningApp {
  /** `http://127.0.0.1:<port>` */
  readonly url: string
  readonly port: number
  /** JSON log lines the app wrote (the idempotency outcome lines among them). */
  readonly logs: string[]
  close(): Promise<void>
}

/** What a test route's handler answers; `chunks` are written one at a time. */
export interface TestReply {
  readonly status: number
  readonly headers?: Readonly<Record<string, string>>
  readonly chunks: readonly (string | Buffer)[]
}

/** A POST route of a test app, protected with the given route options. */
export interface TestRoute {
  readonly path: string
  /** Route options that do not depend on the framework's request type. */
  readonly options?: Omit<RouteOptions<unknown>, 'fingerprint' | 'key'>
  /** The route's `key` function reads this member of the parsed JSON body (a webhook's event id). */
  readonly keyFromBody?: string
  readonly reply: (request: { body: unknown; idempotency: IdempotencyInfo | null }) => TestReply
}

export interface Adapter {
  readonly name:
    | 'fastify'
    | 'fastify4'
    | 'express'
    | 'express4'
    | 'hono'
    | 'hono-node-server1'
    | 'nest-express'
    | 'nest-fastify'
    | 'fetch'
    | 'fetch-bun'
    | 'fetch-deno'
    | 'koa'
  /** The framework's example app on `store`. */
  example(store: IdempotencyStore, options?: { leaseMs?: number; waitMs?: number }): Promise<RunningApp>
  /**
   * An app with only the given routes; the principal is the `Authorization` header's value
   * (required), as in the example apps.
   */
  custom(store: IdempotencyStore, routes: readonly TestRoute[]): Promise<RunningApp>
}

const secrets = { current: 1, keys: { 1: SECRET } }

/** A route's options in the framework's request type, with its `key` function when it has `keyFromBody`. */
export function routeOptionsOf<R>(route: TestRoute, bodyOf: (request: R) => unknown): RouteOptions<R> | true {
  const field = route.keyFromBody
  if (field === undefined) return (route.options ?? true) as RouteOptions<R> | true
  const key = async (request: R) => {
    const body = (await bodyOf(request)) as Record<string, unknown> | undefined
    return body?.[field] as string | undefined
  }
  return { ...(route.options as RouteOptions<R> | undefined), key }
}

function logSink(): { logs: string[]; stream: Writable } {
  const logs: string[] = []
  const stream = new Writable({
    write(chunk, _encoding, done) {
      logs.push(chunk.toString())
      done()
    },
  })
  return { logs, stream }
}

const nextTick = () => new Promise<void>((resolve) => setImmediate(resolve))

/** What every framework's example app is built with: the store, the secret, the options, the log. */
function exampleOptions(store: IdempotencyStore, options: { leaseMs?: number; waitMs?: number }, stream: Writable) {
  return {
    store,
    secret: SECRET,
    leaseMs: options.leaseMs,
    waitMs: options.waitMs,
    logger: { level: 'info', stream },
  }
}

/**
 * The Fastify plugin on a given `fastify` module: the devDependency (5) or the `fastify4` alias,
 * typed as the one the example is written against (their app APIs used here are the same).
 */
function fastifyAdapterOn(name: 'fastify' | 'fastify4', framework: typeof Fastify): Adapter {
  return {
    name,
    async example(store, options = {}) {
      const { logs, stream } = logSink()
      const app = await buildExampleApp({ ...exampleOptions(store, options, stream), fastify: framework })
      await app.listen({ port: 0, host: '127.0.0.1' })
      return running(app.server, logs, () => app.close())
    },
    async custom(store, routes) {
      const { logs, stream } = logSink()
      const app = framework({ logger: { level: 'info', stream } })
      await app.register(fastifyIdempotency, {
        store,
        secrets,
        principal: (request) => request.headers.authorization,
      })
      for (const route of routes) {
        const idempotency = routeOptionsOf(route, (request: FastifyRequest) => request.body) as true
        app.post(route.path, { config: { idempotency } }, async (request, reply) => {
          const answer = route.reply({ body: request.body, idempotency: request.idempotency })
          reply.code(answer.status).headers({ ...answer.headers })
          // A stream payload: Fastify sends it chunk by chunk (the plugin reads it to store it).
          return reply.send(Readable.from(answer.chunks.map((chunk) => Buffer.from(chunk))))
        })
      }
      await app.listen({ port: 0, host: '127.0.0.1' })
      return running(app.server, logs, () => app.close())
    },
  }
}

export const fastifyAdapter = fastifyAdapterOn('fastify', Fastify)
export const fastify4Adapter = fastifyAdapterOn('fastify4', fastify4 as unknown as typeof Fastify)

/** The Express middleware on a given `express` module: the devDependency (5) or the `express4` alias. */
function expressAdapterOn(name: 'express' | 'express4', framework: typeof express): Adapter {
  return {
    name,
    async example(store, options = {}) {
      const { logs, stream } = logSink()
      const app = await buildExpressExampleApp({ ...exampleOptions(store, options, stream), express: framework })
      return listen(createServer(app), logs)
    },
    async custom(store, routes) {
      const { logs, stream } = logSink()
      const app = framework()
      app.use((req, _res, next) => {
        req.log = {
          info: (object, msg) => stream.write(`${JSON.stringify({ level: 30, ...object, msg })}\n`),
          warn: (object, msg) => stream.write(`${JSON.stringify({ level: 40, ...object, msg })}\n`),
          error: (object, msg) => stream.write(`${JSON.stringify({ level: 50, ...object, msg })}\n`),
        }
        next()
      })
      app.use(framework.json())
      const idem = expressIdempotency({ store, secrets, principal: (req) => req.headers.authorization })
      for (const route of routes) {
        app.post(route.path, idem(routeOptionsOf(route, (req: express.Request) => req.body)), async (req, res) => {
          const answer = route.reply({ body: req.body, idempotency: req.idempotency })
          res.status(answer.status).set({ ...answer.headers })
          // res.write per chunk, then res.end: a chunked response.
          for (const chunk of answer.chunks) {
            res.write(chunk)
            await nextTick()
          }
          res.end()
        })
      }
      app.use(idem.errors)
      return listen(createServer(app), logs)
    },
  }
}

export const expressAdapter = expressAdapterOn('express', express)
export const express4Adapter = expressAdapterOn('express4', express4 as unknown as typeof express)

/**
 * The Hono middleware served by a given @hono/node-server's `getRequestListener`: the
 * devDependency (2) or the `hono-node-server1` alias.
 */
function honoAdapterOn(name: 'hono' | 'hono-node-server1', requestListener: typeof getRequestListener): Adapter {
  return {
    name,
    async example(store, options = {}) {
      const { logs, stream } = logSink()
      const app = await buildHonoExampleApp(exampleOptions(store, options, stream))
      return listen(createServer(requestListener(app.fetch)), logs)
    },
    async custom(store, routes) {
      const { logs, stream } = logSink()
      const app = new Hono<{ Variables: HonoIdempotencyEnv['Variables'] & { logger: object } }>()
      const line = (level: number) => (object: object, msg: string) =>
        stream.write(`${JSON.stringify({ level, ...object, msg })}\n`)
      const logger = { info: line(30), warn: line(40), error: line(50) }
      app.use(async (c, next) => {
        c.set('logger', logger)
        await next()
      })
      const idem = honoIdempotency({ store, secrets, principal: (c) => c.req.header('authorization') })
      for (const route of routes) {
        app.post(route.path, idem(routeOptionsOf(route, (c: Context) => c.req.json())), async (c) => {
          const answer = route.reply({ body: await c.req.json(), idempotency: c.get('idempotency') })
          // A stream body, a chunk per tick: the middleware reads it to the end to store it.
          const chunks = answer.chunks.map((chunk) => Buffer.from(chunk))
          const body = new ReadableStream<Uint8Array>({
            async pull(controller) {
              const chunk = chunks.shift()
              if (chunk === undefined) return controller.close()
              await nextTick()
              controller.enqueue(chunk)
            },
          })
          return c.body(body, answer.status as 200, { ...answer.headers })
        })
      }
      return listen(createServer(requestListener(app.fetch)), logs)
    },
  }
}

export const honoAdapter = honoAdapterOn('hono', getRequestListener)
export const honoNodeServer1Adapter = honoAdapterOn(
  'hono-node-server1',
  getRequestListenerV1 as unknown as typeof getRequestListener,
)

/**
 * The Web-standard wrapper (`idemkit/fetch`): the handler served on Node through
 * @hono/node-server's `getRequestListener`, which turns Node's requests into Fetch ones (and
 * passes its own second argument, which the wrapper hands on untouched).
 */
export const fetchAdapter: Adapter = {
  name: 'fetch',
  async example(store, options = {}) {
    const { logs, stream } = logSink()
    const app = buildFetchExampleApp(exampleOptions(store, options, stream))
    return listen(createServer(getRequestListener(app)), logs)
  },
  async custom(store, routes) {
    const { logs, stream } = logSink()
    const idem = fetchIdempotency({
      store,
      secrets,
      principal: (request) => request.headers.get('authorization') ?? undefined,
      onEvent: (event) => void stream.write(`${JSON.stringify({ level: 30, idempotency: event })}\n`),
    })
    const handlers = new Map(
      routes.map((route) => [
        route.path,
        idem(
          async (request: Request) => {
            const answer = route.reply({ body: await request.json(), idempotency: idempotencyOf(request) })
            // A stream body, a chunk per tick: the wrapper reads it to the end to store it.
            const chunks = answer.chunks.map((chunk) => Buffer.from(chunk))
            const body = new ReadableStream<Uint8Array>({
              async pull(controller) {
                const chunk = chunks.shift()
                if (chunk === undefined) return controller.close()
                await nextTick()
                controller.enqueue(chunk)
              },
            })
            return new Response(body, { status: answer.status, headers: { ...answer.headers } })
          },
          // A clone: the handler reads the request's own body.
          routeOptionsOf(route, (request: Request) => request.clone().json()),
        ),
      ]),
    )
    const app = (request: Request) => {
      const handler = request.method === 'POST' ? handlers.get(new URL(request.url).pathname) : undefined
      return handler === undefined ? new Response('not found', { status: 404 }) : handler(request)
    }
    return listen(createServer(getRequestListener(app)), logs)
  },
}

/** The Koa middleware on Koa 3, with @koa/router and @koa/bodyparser. */
export const koaAdapter: Adapter = {
  name: 'koa',
  async example(store, options = {}) {
    const { logs, stream } = logSink()
    const app = buildKoaExampleApp(exampleOptions(store, options, stream))
    return listen(createServer(app.callback()), logs)
  },
  async custom(store, routes) {
    const { logs, stream } = logSink()
    const app = new Koa<KoaIdempotencyState>()
    const line = (level: number) => (object: object, msg: string) =>
      stream.write(`${JSON.stringify({ level, ...object, msg })}\n`)
    const log = { info: line(30), warn: line(40), error: line(50) }
    app.use(async (ctx, next) => {
      ;(ctx as { log?: object }).log = log
      await next()
    })
    app.use(bodyParser())
    const idem = koaIdempotency({ store, secrets, principal: (ctx) => ctx.get('authorization') || undefined })
    const router = new Router<KoaIdempotencyState>()
    for (const route of routes) {
      router.post(
        route.path,
        idem(routeOptionsOf(route, (ctx: Koa.Context) => (ctx.request as { body?: unknown }).body)),
        async (ctx) => {
          const answer = route.reply({ body: ctx.request.body, idempotency: ctx.state.idempotency })
          ctx.status = answer.status
          ctx.set({ ...answer.headers })
          // A stream body, a chunk per tick: Koa pipes it into the response the middleware holds.
          const chunks = answer.chunks.map((chunk) => Buffer.from(chunk))
          ctx.body = Readable.from(
            (async function* () {
              for (const chunk of chunks) {
                await nextTick()
                yield chunk
              }
            })(),
          )
        },
      )
    }
    app.use(router.routes())
    return listen(createServer(app.callback()), logs)
  },
}

/** Every adapter on every framework major the peer ranges claim, for `describe.each`. */
export const ADAPTERS: readonly (readonly [name: string, adapter: Adapter])[] = [
  ['fastify', fastifyAdapter],
  ['fastify4', fastify4Adapter],
  ['express', expressAdapter],
  ['express4', express4Adapter],
  ['hono', honoAdapter],
  ['hono-node-server1', honoNodeServer1Adapter],
  ['nest-express', nestAdapter('express')],
  ['nest-fastify', nestAdapter('fastify')],
  ['fetch', fetchAdapter],
  ['koa', koaAdapter],
]

/** The NestJS module on one of its platforms (examples/nest-app.ts; test routes in test/nestjs). */
export function nestAdapter(platform: NestPlatform): Adapter {
  return {
    name: `nest-${platform}`,
    async example(store, options = {}) {
      const { logs, stream } = logSink()
      const app = await buildNestExampleApp({ store, secret: SECRET, platform, ...options, logger: { stream } })
      await app.listen(0, '127.0.0.1')
      return running(app.getHttpServer(), logs, () => app.close())
    },
    async custom(store, routes) {
      const { logs, stream } = logSink()
      const principal = (request: NestRequest) => request.headers.authorization
      const app = await nestTestApp(platform, { store, secrets, principal }, routes, stream)
      await app.listen(0, '127.0.0.1')
      return running(app.getHttpServer(), logs, () => app.close())
    },
  }
}

function running(server: Server, logs: string[], close: () => Promise<unknown>): RunningApp {
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    logs,
    async close() {
      await close()
    },
  }
}

/** `server` listening on a free 127.0.0.1 port; closing it also drops keep-alive connections. */
export async function listen(server: Server, logs: string[] = []): Promise<RunningApp> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', resolve)
  })
  return running(server, logs, async () => {
    const closed = new Promise<void>((resolve) => server.close(() => resolve()))
    server.closeAllConnections()
    await closed
  })
}

/** A response read to the end. */
export interface TestResponse {
  readonly status: number
  readonly headers: Headers
  readonly body: Buffer
  readonly text: string
  // biome-ignore lint/suspicious/noExplicitAny: test bodies are read field by field
  json(): any
}

/** Sends one request with fetch (undici) and reads the whole body. */
export async function send(
  app: RunningApp,
  method: string,
  path: string,
  options: { headers?: Record<string, string>; body?: unknown; signal?: AbortSignal } = {},
): Promise<TestResponse> {
  const body =
    options.body === undefined
      ? undefined
      : typeof options.body === 'string'
        ? options.body
        : JSON.stringify(options.body)
  const response = await fetch(`${app.url}${path}`, { method, headers: options.headers, body, signal: options.signal })
  const bytes = Buffer.from(await response.arrayBuffer())
  const text = bytes.toString('utf8')
  return { status: response.status, headers: response.headers, body: bytes, text, json: () => JSON.parse(text) }
}

/** Headers of an authenticated JSON request, with an Idempotency-Key when `key` is given. */
export function authHeaders(user: string, key?: string): Record<string, string> {
  const out: Record<string, string> = { authorization: `Bearer ${user}`, 'content-type': 'application/json' }
  if (key !== undefined) out['idempotency-key'] = key
  return out
}

/**
 * Sends a request over a raw socket, byte for byte as given (`\r\n` line ends), with
 * `Connection: close`, and parses the status line and the body (Content-Length framing).
 */
export async function sendRaw(
  app: RunningApp,
  head: readonly string[],
  body = '',
): Promise<{ status: number; headers: string; body: string }> {
  const request = `${[...head, `Content-Length: ${Buffer.byteLength(body)}`, 'Connection: close'].join('\r\n')}\r\n\r\n${body}`
  const raw = await new Promise<string>((resolve, reject) => {
    const socket = connect({ port: app.port, host: '127.0.0.1' })
    const chunks: Buffer[] = []
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('error', reject)
    socket.on('end', () => resolve(Buffer.concat(chunks).toString('latin1')))
    socket.write(request, 'latin1')
  })
  const split = raw.indexOf('\r\n\r\n')
  const headers = raw.slice(0, split)
  return { status: Number(headers.split(' ')[1]), headers, body: raw.slice(split + 4) }
}
