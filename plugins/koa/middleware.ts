/**
 * The Koa middleware (Koa 2 and 3, with @koa/router): the same options, guard and answers as the
 * other adapters (docs/design.md §5). It claims when it runs — so put authentication, body parsing
 * and validation before it — fingerprints the body as the client sent it (the raw body the body
 * parser kept), and holds the response on Koa's Node response until the completion is written,
 * with the code Express and NestJS use (src/http/node-response.ts): whatever writes the answer —
 * Koa's own response of `ctx.body`, an error handler before this middleware, Koa's default error
 * answer — is captured.
 */
import type { Context, Middleware } from 'koa'
import { isJsonMediaType, mediaType } from '../../src/core/fingerprint.js'
import { type Begin, type GuardInput, type IdempotencyInfo, routeGuards } from '../../src/http/guard.js'
import { captureResponse } from '../../src/http/node-response.js'
import { type IdempotencyOptions, parseOptions, type ResolvedOptions } from '../../src/http/options.js'
import {
  type HttpResponse,
  ProblemCode,
  problemResponse,
  STATUS_EXECUTED,
  STATUS_HEADER,
  unrecordedResponse,
} from '../../src/http/problem.js'
import { guardInput, hasBody } from '../../src/http/request-input.js'
import { requestLogger } from '../../src/http/request-logger.js'
import { checkTransactionStore, type RouteOptions, resolveRoute } from '../../src/http/route-options.js'
import { reportStore } from '../../src/http/startup.js'
import { kKoaRequestState } from '../../src/http/symbols.js'
import { SAFE_METHODS } from '../../src/http/web-standard.js'

/** What the middleware sets: `ctx.state.idempotency`, `null` on requests it let through. */
export interface KoaIdempotencyState {
  idempotency: IdempotencyInfo | null
}
/** Middleware options: the shared options; `principal` and `fingerprint` receive the Koa context. */
export type KoaIdempotencyOptions = IdempotencyOptions<Context>
/** Per-route overrides: `idem({ ...overrides })`. */
export type KoaIdempotencyRouteOptions = RouteOptions<Context>

/**
 * What `idempotency(options)` returns: the middleware for the routes it is put on,
 * `router.post('/orders', auth, validate, idem(), handler)`, or `router.use(idem())`. Route
 * options given here are validated now, once (`ERR_IDEM_INVALID_OPTION` for an unknown or
 * invalid one).
 */
export type KoaIdempotency = (route?: KoaIdempotencyRouteOptions | true) => Middleware<KoaIdempotencyState>

/** Per-request state: set once, so a request is never guarded twice. */
interface RequestState {
  error?: unknown
}

type WithState = Context & { [kKoaRequestState]?: RequestState }

/** The raw body koa-body < 7 keeps with `includeUnparsed: true`, on the parsed body. */
const UNPARSED_BODY = Symbol.for('unparsedBody')

/**
 * Creates the middleware factory for Koa 2 and 3.
 * @param input the same options as the other adapters (`store`, `secrets`, `principal`, ...).
 * @returns `idem`: call `idem()` or `idem(routeOptions)` per route or router.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` or `ERR_IDEM_INVALID_SECRET`.
 * @example
 * const idem = idempotency({ store: redisStore({ redis }), secrets, principal: (ctx) => ctx.state.user?.id })
 * router.post('/orders', authenticate, bodyParser(), idem(), createOrder)
 */
export function idempotency(input: KoaIdempotencyOptions): KoaIdempotency {
  const options = parseOptions(input)
  // Koa has no logger of its own: the startup report goes to the idemkit:event channel.
  void reportStore(options.store, undefined)

  return function idempotencyFor(overrides) {
    const route = resolveRoute(overrides ?? true, options.route, '')
    checkTransactionStore(route, options.store, '')
    // One guard per operation: per route pattern and method.
    const guardFor = routeGuards(options, route)

    return async function idempotencyMiddleware(ctx, next) {
      const context = ctx as unknown as WithState
      // Reads need no key (RFC 9110 §9.2.1); a request is guarded once however often the middleware is on its way.
      if (context[kKoaRequestState] !== undefined || SAFE_METHODS.has(ctx.method)) return next()
      const state: RequestState = {}
      context[kKoaRequestState] = state
      const guard = guardFor(operationOf(context))
      // A pino-style `ctx.log` (koa-pino-logger, or one the app sets) when there is one; else the console.
      const log = requestLogger((ctx as { log?: unknown }).log)
      const input = inputOf(context, route.fingerprint !== undefined, route.key !== undefined)
      if (input === undefined) {
        // The fingerprint would miss the body: two different requests could share one answer.
        log.error(
          { idempotency: { operation: guard.operation } },
          'request body not read before the idempotency middleware: put a body parser for this content type before it',
        )
        respond(
          context,
          problemResponse(ProblemCode.BODY_UNREAD, 'This route does not read request bodies of this content type.'),
        )
        return
      }
      const begin = await guard.begin(context, input, log)
      if (begin.kind === 'pass') {
        ctx.state.idempotency = null
        return next()
      }
      if (begin.kind === 'respond') {
        ctx.state.idempotency = begin.info ?? null
        respond(context, begin.response)
        return
      }
      ctx.state.idempotency = begin.info
      await run(options, begin, state, context, next, route.storedHeaders)
    }
  }
}

/**
 * Runs the handler (the middleware after this one) and records what Koa answers. The response is
 * captured on `ctx.res` from the claim on, and released once the completion is written: Koa
 * writes the answer after the whole middleware chain has returned, so the capture's end, not this
 * function's, is where the answer is known.
 */
async function run(
  options: ResolvedOptions<Context>,
  begin: Extract<Begin, { kind: 'run' }>,
  state: RequestState,
  ctx: WithState,
  next: () => Promise<unknown>,
  storedHeaders: readonly string[],
): Promise<void> {
  const log = requestLogger((ctx as { log?: unknown }).log)
  // Set before the capture: a replacement answer keeps it, with its own value.
  ctx.res.setHeader(STATUS_HEADER, STATUS_EXECUTED)
  const capture = captureResponse(
    ctx.res,
    storedHeaders,
    (captured) => {
      begin.finish({ ok: true, value: { ...captured, error: state.error } }).then(
        (replacement) => {
          release()
          capture.send(replacement)
        },
        (error: unknown) => {
          // finish never rejects; should it, the client still gets an answer.
          log.error({ err: error, idempotency: { digest: begin.info.digest } }, 'idempotency completion failed')
          release()
          capture.send(unrecordedResponse(options.unavailableRetryAfterMs))
        },
      )
    },
    // Destroyed before it ended: nothing will be sent, and the effect is unknown (ABANDONED).
    (error) => {
      release()
      void begin.finish({ ok: false, error: state.error ?? error })
    },
  )
  /**
   * Koa writes no answer to a client that has gone (`ctx.writable` is false then: Koa 3 ends the
   * response empty, Koa 2 not at all), but the answer must be stored whatever became of the
   * client, so its retry replays it. From the handler's end until the capture is released, Koa
   * sees the response writable and writes the answer into the capture. Not before: an error Koa
   * hears from the socket while the handler runs is then not answered into the capture.
   */
  const holdWritable = () => {
    Object.defineProperty(ctx.response, 'writable', { configurable: true, get: () => true })
  }
  function release(): void {
    delete (ctx.response as { writable?: boolean }).writable
  }
  try {
    await next()
  } catch (error) {
    // Whoever answers it (an error handler before this middleware, or Koa's onerror) writes into
    // the capture; the error itself tells the classifier what it meant (retryable: true, a status).
    state.error = error
    holdWritable()
    throw error
  }
  holdWritable()
}

/**
 * The default operation, `METHOD /route/pattern` (docs/design.md §2): @koa/router's matched
 * route (`ctx._matchedRoute`, with the router's prefix), else the path of the router layer the
 * middleware runs in (`router.use(idem())`: one operation below it); without a router, `METHOD /`,
 * one scope space for every path (the fingerprint still tells them apart).
 */
function operationOf(ctx: Context): string {
  const routed = ctx as Context & { _matchedRoute?: unknown; routerPath?: unknown }
  const pattern = routed._matchedRoute ?? routed.routerPath
  return `${ctx.method} ${typeof pattern === 'string' && pattern !== '' ? pattern : '/'}`
}

/**
 * The guard's input: the request target as received (`ctx.originalUrl`, before any mount
 * rewrote `ctx.url`), the raw header lines, and the body as the client sent it — the raw body
 * the parser kept (`ctx.request.rawBody`: @koa/bodyparser, koa-bodyparser, koa-body 7 with
 * `includeUnparsed: true`), else the parsed `ctx.request.body`. `undefined` when the request
 * carries a key (or the route has a `key` function) and a body no parser has read: it cannot be
 * fingerprinted.
 */
function inputOf(ctx: Context, customFingerprint: boolean, keyed: boolean): GuardInput | undefined {
  const req = ctx.req
  const parts = { method: ctx.method, url: ctx.originalUrl, headers: req.headers, rawHeaders: req.rawHeaders }
  if ((req.headers['idempotency-key'] === undefined && !keyed) || customFingerprint || !hasBody(req)) {
    return guardInput({ ...parts, body: undefined }, keyed)
  }
  const request = ctx.request as { rawBody?: unknown; body?: unknown }
  const parsed = request.body as Record<symbol, unknown> | undefined
  const raw = request.rawBody ?? (typeof parsed === 'object' && parsed !== null ? parsed[UNPARSED_BODY] : undefined)
  if (typeof raw === 'string' || Buffer.isBuffer(raw)) {
    const bytes = typeof raw === 'string' ? Buffer.from(raw, 'utf8') : raw
    if (bytes.byteLength === 0) return guardInput({ ...parts, body: undefined }, keyed)
    if (!isJsonMediaType(mediaType(req.headers['content-type']))) return guardInput({ ...parts, body: bytes }, keyed)
    try {
      return guardInput({ ...parts, body: JSON.parse(bytes.toString('utf8')) }, keyed)
    } catch {
      // Not JSON: it cannot be canonicalised, so the guard answers 400 body-invalid, holding no key.
      return { ...guardInput({ ...parts, body: undefined }, keyed), fingerprint: null }
    }
  }
  // No raw body: what the parser made of it, if a parser read the stream (@koa/bodyparser leaves a
  // type it does not parse unread, with `{}` as the body).
  if (parsed === undefined || !req.readableEnded) return undefined
  return guardInput({ ...parts, body: parsed }, keyed)
}

/** The layer's own answer, through Koa: headers set earlier (CORS, ...) stay. */
function respond(ctx: Context, response: HttpResponse): void {
  ctx.status = response.status
  for (const [name, value] of Object.entries(response.headers)) ctx.set(name, value)
  ctx.body = typeof response.body === 'string' ? Buffer.from(response.body) : response.body
}
