/**
 * The Hono middleware: the same options, guard and answers as the Fastify plugin and the Express
 * middleware (docs/design.md §5). It claims when it runs — so put authentication and validation before it —
 * and records the handler's Response before it leaves: the body is read to the end, stored, and
 * sent on as the same bytes (or replaced by a 503 when it could not be recorded). The Request and
 * Response handling is src/http/web-standard.ts, shared with `idemkit/fetch`.
 */
import type { Context, MiddlewareHandler } from 'hono'
import { matchedRoutes, routePath } from 'hono/route'
import { type IdempotencyInfo, routeGuards } from '../../src/http/guard.js'
import { type IdempotencyOptions, parseOptions } from '../../src/http/options.js'
import type { HttpResponse } from '../../src/http/problem.js'
import { requestLogger } from '../../src/http/request-logger.js'
import { checkTransactionStore, type RouteOptions, resolveRoute } from '../../src/http/route-options.js'
import { reportStore } from '../../src/http/startup.js'
import { kHonoTaken } from '../../src/http/symbols.js'
import { recordResponse, SAFE_METHODS, webGuardInput } from '../../src/http/web-standard.js'

/** What the middleware sets: `c.get('idempotency')`, `null` on requests it did not protect. */
export interface IdempotencyVariables {
  idempotency: IdempotencyInfo | null
}
/** The Hono environment the middleware adds to the handlers after it. */
export interface HonoIdempotencyEnv {
  Variables: IdempotencyVariables
}
/** Middleware options: the shared options; `principal` and `fingerprint` receive the Context. */
export type HonoIdempotencyOptions = IdempotencyOptions<Context>
/** Per-route overrides: `idem({ ...overrides })`. */
export type HonoIdempotencyRouteOptions = RouteOptions<Context>

/**
 * What `idempotency(options)` returns: the middleware for the routes it is put on,
 * `app.post('/orders', auth, idem(), handler)`, or `app.use('/orders/*', idem())`. Route options
 * given here are validated now, once (`ERR_IDEM_INVALID_OPTION` for an unknown or invalid one).
 */
export type HonoIdempotency = (route?: HonoIdempotencyRouteOptions | true) => MiddlewareHandler<HonoIdempotencyEnv>

/** Set once, so a request is never guarded twice. */
type WithState = Context & { [kHonoTaken]?: true }

/**
 * Creates the middleware factory for Hono 4.
 * @param input the same options as the Fastify plugin (`store`, `secrets`, `principal`, ...).
 * @returns `idem`: call `idem()` or `idem(routeOptions)` per route.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` or `ERR_IDEM_INVALID_SECRET`.
 * @example
 * const idem = idempotency({ store: redisStore({ redis }), secrets, principal: (c) => c.get('user') })
 * app.post('/orders', authenticate, idem(), (c) => c.json(createOrder(c.get('idempotency')), 201))
 */
export function idempotency(input: HonoIdempotencyOptions): HonoIdempotency {
  const options = parseOptions(input)
  // Hono has no logger of its own: the startup report goes to the idemkit:event channel.
  void reportStore(options.store, undefined)

  return function idempotencyFor(overrides) {
    const route = resolveRoute(overrides ?? true, options.route, '')
    checkTransactionStore(route, options.store, '')
    // One guard per operation: per route pattern and method.
    const guardFor = routeGuards(options, route)

    return async function idempotencyMiddleware(c, next) {
      const method = c.req.method
      if ((c as WithState)[kHonoTaken] !== undefined || method === 'HEAD') return next()
      // `app.use` and `app.all` register under ALL: there, reads pass as on an Express router.
      const mounted = matchedRoutes(c)[c.req.routeIndex]?.method === 'ALL'
      if (mounted && SAFE_METHODS.has(method)) return next()
      ;(c as WithState)[kHonoTaken] = true
      // The operation is `METHOD /route/pattern`, read now: after next() the index has moved on.
      const operation = `${method} ${routePath(c)}`
      const guard = guardFor(operation)
      // On @hono/node-server the Node request (`c.env.incoming`) gives the target as received and
      // the raw header lines; Hono caches the body it reads, so the handler can read it again.
      const input = await webGuardInput(c.req.raw, {
        node: (c.env as { incoming?: unknown } | undefined)?.incoming,
        body: route.fingerprint === undefined ? () => c.req.arrayBuffer() : undefined,
        keyed: route.key !== undefined,
      })
      // A pino-style `c.var.logger` (hono-pino, or one the app sets) when there is one; else the console.
      const begin = await guard.begin(c, input, requestLogger((c as Context).get('logger')))
      if (begin.kind === 'pass') {
        c.set('idempotency', null)
        return next()
      }
      if (begin.kind === 'respond') {
        c.set('idempotency', begin.info ?? null)
        return respond(c, begin.response)
      }
      c.set('idempotency', begin.info)
      // Headers set before the handler (by middleware before this one) stay on a replacement.
      const before = new Headers(c.res.headers)
      try {
        await next()
      } catch (error) {
        // Hono's compose hands an Error to onError (then `c.error` is set); anything else lands here.
        await begin.finish({ ok: false, error })
        throw error
      }
      if (!c.finalized) {
        await begin.finish({ ok: false, error: c.error ?? new Error('The handler returned no response.') })
        return
      }
      const recorded = await recordResponse(begin, c.res, route.storedHeaders, c.error, before)
      // Cleared first: Hono's setter would copy the old response's headers onto the new one.
      c.res = undefined
      c.res = recorded
    }
  }
}

/** The layer's own answer, built by Hono so headers set earlier (CORS, ...) stay. */
function respond(c: Context, response: HttpResponse): Response {
  return c.body(response.body as string, response.status as 200, response.headers as Record<string, string>)
}
