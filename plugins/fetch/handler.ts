/**
 * The Web-standard front door: a `(request: Request) => Response` handler (a Next.js route
 * handler, `Bun.serve`, `Deno.serve`, a React Router or SvelteKit action) wrapped with the same
 * options, guard and answers as the other adapters (docs/design.md §5). The wrapper claims when
 * the handler is called, reads the request body once (from a clone: the handler still reads its
 * own), and records the handler's Response before it leaves, as the Hono middleware does with
 * the same code (src/http/web-standard.ts).
 */
import { type IdempotencyInfo, routeGuards } from '../../src/http/guard.js'
import { type IdempotencyOptions, parseOptions } from '../../src/http/options.js'
import { requestLogger } from '../../src/http/request-logger.js'
import { checkTransactionStore, type RouteOptions, resolveRoute } from '../../src/http/route-options.js'
import { reportStore } from '../../src/http/startup.js'
import { recordResponse, SAFE_METHODS, webGuardInput, webResponse } from '../../src/http/web-standard.js'

/** Options: the shared options; `principal` and `fingerprint` receive the Request. */
export type FetchIdempotencyOptions = IdempotencyOptions<Request>
/** Per-handler overrides: `idem(handler, { ...overrides })`. */
export type FetchIdempotencyRouteOptions = RouteOptions<Request>

/**
 * A Web-standard handler. The arguments after the request (Next.js's `{ params }`, Bun's
 * server, Deno's connection info) are passed through untouched.
 */
export type FetchHandler<R extends Request = Request, A extends unknown[] = []> = (
  request: R,
  ...rest: A
) => Response | Promise<Response>

/**
 * What `idempotency(options)` returns: wraps one handler, `idem(handler)` or
 * `idem(handler, routeOptions)`, and returns a handler of the same shape. Route options given
 * here are validated now, once (`ERR_IDEM_INVALID_OPTION` for an unknown or invalid one).
 */
export type FetchIdempotency = <R extends Request, A extends unknown[]>(
  handler: FetchHandler<R, A>,
  route?: FetchIdempotencyRouteOptions | true,
) => (request: R, ...rest: A) => Promise<Response>

/**
 * The request view of each Request the wrappers took: its IdempotencyInfo while the handler runs
 * and on replays, `null` when it passed unprotected. Keyed by the Request object itself, so the
 * handler's signature stays the runtime's own (Next.js gives route handlers a second argument).
 */
const VIEWS = new WeakMap<Request, IdempotencyInfo | null>()

/** No logger comes with a Request: warnings and errors go to the console; outcomes to `onEvent`. */
const LOG = requestLogger(undefined)

/**
 * Creates the wrapper for Web-standard handlers.
 * @param input the same options as the other adapters (`store`, `secrets`, `principal`, ...).
 * @returns `idem`: `idem(handler)` or `idem(handler, routeOptions)` per handler.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` or `ERR_IDEM_INVALID_SECRET`.
 * @example
 * const idem = idempotency({ store: redisStore({ redis }), secrets, principal: (request) => userOf(request) })
 * export const POST = idem(async (request) => Response.json(await createOrder(request), { status: 201 }))
 */
export function idempotency(input: FetchIdempotencyOptions): FetchIdempotency {
  const options = parseOptions(input)
  // No framework, no logger: the startup report goes to the idemkit:event channel.
  void reportStore(options.store, undefined)

  return function idempotent<R extends Request, A extends unknown[]>(
    handler: FetchHandler<R, A>,
    overrides?: FetchIdempotencyRouteOptions | true,
  ) {
    if (typeof handler !== 'function') {
      throw new TypeError('idemkit/fetch: the first argument must be the handler, (request) => Response.')
    }
    const route = resolveRoute(overrides ?? true, options.route, '')
    checkTransactionStore(route, options.store, '')
    // One guard per operation: a handler knows no route pattern, so its requests' method and path.
    const guardFor = routeGuards(options, route)

    return async function idempotentHandler(request: R, ...rest: A): Promise<Response> {
      // Reads need no key (RFC 9110 §9.2.1), and a request is guarded once however often it is wrapped.
      if (SAFE_METHODS.has(request.method) || VIEWS.has(request)) return handler(request, ...rest)
      VIEWS.set(request, null)
      const guard = guardFor(`${request.method} ${new URL(request.url).pathname}`)
      const input = await webGuardInput(request, {
        // A clone: the handler reads the request's own body as if nothing had.
        body: route.fingerprint === undefined ? () => request.clone().arrayBuffer() : undefined,
        keyed: route.key !== undefined,
      })
      const begin = await guard.begin(request, input, LOG)
      if (begin.kind === 'pass') return handler(request, ...rest)
      if (begin.kind === 'respond') {
        VIEWS.set(request, begin.info ?? null)
        return webResponse(begin.response)
      }
      VIEWS.set(request, begin.info)
      let response: unknown
      try {
        response = await handler(request, ...rest)
      } catch (error) {
        // No framework turns it into an answer: recorded by the error (retryable: true frees the
        // key, anything else is an unknown effect), then thrown on to the runtime's error handling.
        await begin.finish({ ok: false, error })
        throw error
      }
      if (!(response instanceof Response)) {
        const error = new TypeError('idemkit/fetch: the handler returned no Response.')
        await begin.finish({ ok: false, error })
        throw error
      }
      return recordResponse(begin, response, route.storedHeaders)
    }
  }
}

/**
 * Wraps one handler with its own options: `withIdempotency(handler, { store, secrets, principal,
 * leaseMs: 10_000 })` is `idempotency(options)(handler)`; the route options in `options` are this
 * handler's.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` or `ERR_IDEM_INVALID_SECRET`.
 * @example
 * export const POST = withIdempotency(createOrder, { store, secrets, principal: (request) => userOf(request) })
 */
export function withIdempotency<R extends Request, A extends unknown[]>(
  handler: FetchHandler<R, A>,
  options: FetchIdempotencyOptions,
): (request: R, ...rest: A) => Promise<Response> {
  return idempotency(options)(handler)
}

/**
 * What a wrapped handler sees of idempotency for its request: the fencing token, the abort
 * signal, the digest prefix, `db` on a `transaction: true` handler (the same view as Fastify's
 * `request.idempotency`); `null` on a request the wrapper let through unprotected or never saw.
 * @example
 * const { fencingToken, signal } = idempotencyOf(request) ?? {}
 */
export function idempotencyOf(request: Request): IdempotencyInfo | null {
  return VIEWS.get(request) ?? null
}
