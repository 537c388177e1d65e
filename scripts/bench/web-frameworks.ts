/**
 * The bench servers of the two later front doors (server.ts picks them by FRAMEWORK): a
 * Web-standard handler (`idemkit/fetch`) on Node through @hono/node-server's request listener,
 * as a Next.js route handler or `Bun.serve` handler would be, and Koa 3 with @koa/router and
 * @koa/bodyparser (`idemkit/koa`). Each bare route is the same app without the layer, so a row's
 * `× bare` is the layer's cost on that framework alone.
 */
import { createServer, type Server } from 'node:http'
import type { IdempotencyStore } from '../../src/core/store.js'

/** What server.ts lends a framework's server: the shared handler, floor, stats and the build. */
export interface BenchContext {
  readonly port: number
  /** Routes behind the layer (MODE redis or memory); false: the bare route. */
  readonly protectedRoutes: boolean
  readonly routes: readonly string[]
  /** The route options of the route whose duplicates wait (`inFlight`). */
  readonly waitRoute: { readonly inFlight: { readonly waitMs: number } }
  readonly secret: string
  store(): Promise<IdempotencyStore>
  floor(route: string, key: string): Promise<void>
  handle(route: string, holdMs: number): Promise<{ ok: true; n: number }>
  stats(): object
  fromDist<T>(path: string): Promise<T>
}

async function listen(server: Server, port: number): Promise<number> {
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve))
  const address = server.address()
  return typeof address === 'object' && address ? address.port : port
}

/** One Web-standard handler per route; the handler reads the JSON body, as a route handler does. */
export async function startFetch(context: BenchContext): Promise<number> {
  const { getRequestListener } = await import('@hono/node-server')
  const { idempotency } =
    await context.fromDist<typeof import('../../plugins/fetch/index.js')>('plugins/fetch/index.js')
  const idem = context.protectedRoutes
    ? idempotency({
        store: await context.store(),
        secrets: { current: 1, keys: { 1: context.secret } },
        anonymous: true,
      })
    : undefined
  const handlers = new Map<string, (request: Request) => Response | Promise<Response>>()
  for (const route of context.routes) {
    const handler = async (request: Request) => {
      await request.json()
      await context.floor(route, request.headers.get('idempotency-key') ?? '')
      const body = await context.handle(route, Number(request.headers.get('x-hold-ms') ?? 0))
      return Response.json(body, { status: 201 })
    }
    handlers.set(`/${route}`, idem ? idem(handler, route === 'wait' ? context.waitRoute : true) : handler)
  }
  const app = (request: Request) => {
    const path = new URL(request.url).pathname
    if (request.method === 'GET' && path === '/__stats') return Response.json(context.stats())
    const handler = request.method === 'POST' ? handlers.get(path) : undefined
    return handler === undefined ? new Response('not found', { status: 404 }) : handler(request)
  }
  return listen(createServer(getRequestListener(app)), context.port)
}

/** Koa 3 with @koa/bodyparser and @koa/router, the middleware per route. */
export async function startKoa(context: BenchContext): Promise<number> {
  const { default: Koa } = await import('koa')
  const { default: Router } = await import('@koa/router')
  const { bodyParser } = await import('@koa/bodyparser')
  const { idempotency } = await context.fromDist<typeof import('../../plugins/koa/index.js')>('plugins/koa/index.js')
  const idem = context.protectedRoutes
    ? idempotency({
        store: await context.store(),
        secrets: { current: 1, keys: { 1: context.secret } },
        anonymous: true,
      })
    : undefined
  const app = new Koa()
  const router = new Router()
  for (const route of context.routes) {
    const handler = async (ctx: import('koa').Context) => {
      await context.floor(route, ctx.get('idempotency-key'))
      ctx.status = 201
      ctx.body = await context.handle(route, Number(ctx.get('x-hold-ms') || 0))
    }
    if (idem) router.post(`/${route}`, route === 'wait' ? idem(context.waitRoute) : idem(), handler)
    else router.post(`/${route}`, handler)
  }
  router.get('/__stats', (ctx) => {
    ctx.body = context.stats()
  })
  app.use(bodyParser())
  app.use(router.routes())
  return listen(createServer(app.callback()), context.port)
}
