/**
 * The Hono middleware: the same options, guard and answers as the Fastify plugin and the Express
 * middleware (docs/design.md §5). It claims when it runs — so put authentication and validation before it —
 * and records the handler's Response before it leaves: the body is read to the end, stored, and
 * sent on as the same bytes (or replaced by a 503 when it could not be recorded).
 */
import type { IncomingHttpHeaders } from 'node:http'
import type { Context, MiddlewareHandler } from 'hono'
import { matchedRoutes, routePath } from 'hono/route'
import { isJsonMediaType, mediaType } from '../../src/core/fingerprint.js'
import { type GuardInput, type IdempotencyInfo, routeGuards } from '../../src/http/guard.js'
import { type IdempotencyOptions, parseOptions } from '../../src/http/options.js'
import type { HttpResponse } from '../../src/http/problem.js'
import { guardInput, type RequestParts } from '../../src/http/request-input.js'
import { requestLogger } from '../../src/http/request-logger.js'
import { storedOf } from '../../src/http/response-codec.js'
import {
  checkTransactionStore,
  type ResolvedRoute,
  type RouteOptions,
  resolveRoute,
} from '../../src/http/route-options.js'
import { reportStore } from '../../src/http/startup.js'
import { kHonoTaken } from '../../src/http/symbols.js'

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

/** Methods `app.use(idem())` lets through: reads need no key (RFC 9110 §9.2.1). */
const SAFE_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE'])
/** Statuses whose responses carry no body (Fetch: a null body status). */
const NULL_BODY_STATUSES: ReadonlySet<number> = new Set([101, 204, 205, 304])

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
      // A pino-style `c.var.logger` (hono-pino, or one the app sets) when there is one; else the console.
      const begin = await guard.begin(c, await inputOf(c, route), requestLogger((c as Context).get('logger')))
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
      const res = c.res
      let body: Buffer
      try {
        body = Buffer.from(await res.arrayBuffer())
      } catch (error) {
        // The body stream failed while it was read: what the client would get is unknown.
        await begin.finish({ ok: false, error })
        throw error
      }
      const replacement = await begin.finish({
        ok: true,
        value: {
          status: res.status,
          headers: storedOf(route.storedHeaders, (name) => res.headers.get(name)),
          body,
          error: c.error,
        },
      })
      // Cleared first: Hono's setter would copy the old response's headers onto the new one.
      c.res = undefined
      c.res =
        replacement === undefined
          ? new Response(NULL_BODY_STATUSES.has(res.status) ? null : body, res)
          : replaced(before, replacement)
    }
  }
}

/**
 * The guard's input. On @hono/node-server the Node request gives the request target as received
 * and the raw header lines (a key sent on two lines is refused as such); on other runtimes the
 * Fetch request stands in. The body is read (Hono caches it: the handler can still read it) only
 * when the request carries a key and the route has no fingerprint function of its own.
 */
async function inputOf(c: Context, route: ResolvedRoute<Context>): Promise<GuardInput> {
  const incoming = (c.env as { incoming?: Partial<RequestParts> } | undefined)?.incoming
  const node = typeof incoming?.url === 'string' && Array.isArray(incoming.rawHeaders) ? incoming : undefined
  const headers: IncomingHttpHeaders = node?.headers ?? Object.fromEntries(c.req.raw.headers)
  const parts = {
    method: c.req.method,
    url: node?.url ?? targetOf(c.req.url),
    headers,
    rawHeaders: node?.rawHeaders ?? [...c.req.raw.headers].flat(),
    body: undefined as unknown,
  }
  if (headers['idempotency-key'] === undefined || route.fingerprint !== undefined) return guardInput(parts)
  const bytes = Buffer.from(await c.req.arrayBuffer())
  if (bytes.byteLength === 0) return guardInput(parts)
  if (!isJsonMediaType(mediaType(headers['content-type']))) return guardInput({ ...parts, body: bytes })
  try {
    // Parsed, so the fingerprint is of the JSON value (RFC 8785), as on the other adapters.
    return guardInput({ ...parts, body: JSON.parse(bytes.toString('utf8')) })
  } catch {
    // Not JSON: it cannot be canonicalised, so the guard answers 400 body-invalid, holding no key.
    return { ...guardInput(parts), fingerprint: null }
  }
}

/** The request target (path and query) of an absolute URL. */
function targetOf(href: string): string {
  const url = new URL(href)
  return `${url.pathname}${url.search}`
}

/** The layer's own answer, built by Hono so headers set earlier (CORS, ...) stay. */
function respond(c: Context, response: HttpResponse): Response {
  return c.body(response.body as string, response.status as 200, response.headers as Record<string, string>)
}

/** A replacement answer: only the headers set before the handler, and the replacement's own. */
function replaced(before: Headers, response: HttpResponse): Response {
  const headers = new Headers(before)
  for (const [name, value] of Object.entries(response.headers)) {
    headers.delete(name)
    for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one)
  }
  return new Response(response.body, { status: response.status, headers })
}
