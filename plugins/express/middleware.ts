/**
 * The Express middleware: the same options, guard and answers as the Fastify plugin (docs/design.md §5).
 * It claims when it runs — so mount authentication and body parsing before it — and holds the
 * handler's response back until the completion is written.
 */
import express, {
  type ErrorRequestHandler,
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
} from 'express'
import { type Begin, type GuardInput, type RouteGuard, routeGuards } from '../../src/http/guard.js'
import { captureResponse, sendResponse } from '../../src/http/node-response.js'
import { type IdempotencyOptions, parseOptions, type ResolvedOptions } from '../../src/http/options.js'
import {
  ProblemCode,
  problemResponse,
  STATUS_EXECUTED,
  STATUS_HEADER,
  unrecordedResponse,
} from '../../src/http/problem.js'
import { guardInput, hasBody } from '../../src/http/request-input.js'
import { requestLogger } from '../../src/http/request-logger.js'
import {
  checkTransactionStore,
  type ResolvedRoute,
  type RouteOptions,
  resolveRoute,
} from '../../src/http/route-options.js'
import { reportStore } from '../../src/http/startup.js'
import { kExpressParsedInput, kExpressRequestState } from '../../src/http/symbols.js'
import './augment.js'

/** Middleware options: the shared options, with Express's request type. */
export type ExpressIdempotencyOptions = IdempotencyOptions<Request>
/** Per-route overrides: `idem({ ...overrides })`. */
export type ExpressIdempotencyRouteOptions = RouteOptions<Request>

/** What `idempotency(options)` returns. */
export interface ExpressIdempotency {
  /**
   * The middleware for the routes it is mounted on: `app.post('/orders', idem(), handler)`, or
   * `router.use(idem())`. Route options given here are validated now, once.
   * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for an unknown or invalid route option.
   */
  (route?: ExpressIdempotencyRouteOptions | true): RequestHandler
  /**
   * Error middleware that shows the layer the error a handler threw or passed to `next(err)`,
   * so an error marked `retryable: true` frees the key for a retry. Mount it after the routes
   * and before your own error handlers: `app.use(idem.errors)`. It only records and passes on.
   */
  readonly errors: ErrorRequestHandler
  /**
   * Middleware that records the request as the body parser produced it, for the fingerprint:
   * mount it right after your body parsers, before any validation that rewrites `req.body`
   * (Joi/celebrate with `convert`, a zod `parse` assigned back, defaults filled in), so a request
   * with another body is a 422, never a replay of the first. `app.use(express.json(), idem.captureBody)`.
   * Without it the fingerprint is taken when `idem()` runs, of `req.body` as it is then.
   * It costs nothing on requests without an Idempotency-Key.
   */
  readonly captureBody: RequestHandler
}

/** Per-request state: set once, so a request is never guarded twice. */
interface RequestState {
  error?: unknown
}

type WithState = Request & { [kExpressRequestState]?: RequestState; [kExpressParsedInput]?: GuardInput }

/** Methods a router-level middleware lets through: reads need no key (RFC 9110 §9.2.1). */
const SAFE_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE'])

/**
 * Creates the middleware factory for Express 5.
 * @param input the same options as the Fastify plugin (`store`, `secrets`, `principal`, ...).
 * @returns `idem`: call `idem()` or `idem(routeOptions)` per route or router; `idem.errors`
 *   is the error recorder.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` or `ERR_IDEM_INVALID_SECRET`.
 * @example
 * const idem = idempotency({ store: redisStore({ redis }), secrets, principal: (req) => req.user?.id })
 * app.post('/orders', authenticate, express.json(), idem(), createOrder)
 * app.use(idem.errors)
 */
export function idempotency(input: ExpressIdempotencyOptions): ExpressIdempotency {
  const options = parseOptions(input)
  defaultRequestProperty()
  // Express has no logger of its own: the startup report goes to the idemkit:event channel.
  void reportStore(options.store, undefined)

  // Whether a route takes its key from a `key` function: captureBody then records every
  // request, since a request with no header may still carry a key.
  let keyed = options.route.key !== undefined
  // Whether `idem.captureBody` ever ran, and whether its absence was reported: without it the
  // fingerprint is of `req.body` after whatever validation rewrote it, so the first protected
  // request with a parsed body says so, once.
  const bodyCapture = { mounted: false, reported: false }

  function middlewareFor(overrides?: ExpressIdempotencyRouteOptions | true): RequestHandler {
    const route = resolveRoute(overrides ?? true, options.route, '')
    checkTransactionStore(route, options.store, '')
    if (route.key !== undefined) keyed = true
    const guardFor = routeGuards(options, route)

    const middleware: RequestHandler = function idempotencyMiddleware(req, res, next) {
      const request = req as WithState
      if (request[kExpressRequestState] !== undefined || req.method === 'HEAD') return next()
      const atRoute = isRouteLevel(req, middleware)
      if (!atRoute && SAFE_METHODS.has(req.method)) return next()
      const state: RequestState = {}
      request[kExpressRequestState] = state
      guardRequest(options, route, guardFor(defaultOperation(req, atRoute)), state, bodyCapture, req, res, next).catch(
        next,
      )
    }
    return middleware
  }

  const captureBody: RequestHandler = function idempotencyCaptureBody(req, _res, next) {
    bodyCapture.mounted = true
    // Only requests that may carry a key are fingerprinted; a body no parser read yet is left
    // for `idem()` to judge (415), never fingerprinted as empty.
    if ((keyed || req.headers['idempotency-key'] !== undefined) && !(req.body === undefined && hasBody(req))) {
      ;(req as WithState)[kExpressParsedInput] = inputOf(req, keyed)
    }
    next()
  }

  const errors: ErrorRequestHandler = function idempotencyErrors(error, req, _res, next) {
    const state = (req as WithState)[kExpressRequestState]
    if (state !== undefined && state.error === undefined) state.error = error
    next(error)
  }

  return Object.assign(middlewareFor, { errors, captureBody })
}

function inputOf(req: Request, keyed: boolean): GuardInput {
  return guardInput(
    {
      method: req.method,
      url: req.originalUrl,
      headers: req.headers,
      rawHeaders: req.rawHeaders,
      body: req.body,
    },
    keyed,
  )
}

async function guardRequest(
  options: ResolvedOptions<Request>,
  route: ResolvedRoute<Request>,
  guard: RouteGuard<Request>,
  state: RequestState,
  bodyCapture: { mounted: boolean; reported: boolean },
  req: Request,
  res: Response,
  next: NextFunction,
): Promise<void> {
  // A pino-style `req.log` (pino-http, or one the app sets) when there is one; else the console.
  const log = requestLogger((req as { log?: unknown }).log)
  let begin: Begin
  try {
    const captured = (req as WithState)[kExpressParsedInput]
    if (
      captured === undefined &&
      (route.key !== undefined || req.headers['idempotency-key'] !== undefined) &&
      req.body === undefined &&
      hasBody(req) &&
      !route.fingerprint
    ) {
      // The fingerprint would miss the body: two different requests could share one answer.
      log.error(
        { idempotency: { operation: guard.operation } },
        'request body not parsed before the idempotency middleware: mount a body parser for this content type before it',
      )
      sendResponse(
        res,
        problemResponse(ProblemCode.BODY_UNREAD, 'This route does not read request bodies of this content type.'),
      )
      return
    }
    if (
      captured === undefined &&
      !bodyCapture.mounted &&
      !bodyCapture.reported &&
      req.body !== undefined &&
      !route.fingerprint
    ) {
      bodyCapture.reported = true
      log.warn(
        { idempotency: { operation: guard.operation } },
        'idem.captureBody is not mounted: the fingerprint is taken of req.body as it is when idem() runs, after any validation that rewrote it, so two different requests could share one answer; mount it right after the body parsers: app.use(express.json(), idem.captureBody)',
      )
    }
    begin = await guard.begin(req, captured ?? inputOf(req, route.key !== undefined), log)
  } catch (error) {
    next(error)
    return
  }

  if (begin.kind === 'pass') {
    req.idempotency = null
    next()
    return
  }
  if (begin.kind === 'respond') {
    req.idempotency = begin.info ?? null
    sendResponse(res, begin.response)
    return
  }

  req.idempotency = begin.info
  // Set before the capture: a replacement answer keeps it, with its own value.
  res.setHeader(STATUS_HEADER, STATUS_EXECUTED)
  const capture = captureResponse(
    res,
    route.storedHeaders,
    // onEnd runs once: the capture ignores every end after the first.
    (captured) => {
      begin.finish({ ok: true, value: { ...captured, error: state.error } }).then(
        (replacement) => capture.send(replacement),
        (error: unknown) => {
          // finish never rejects; should it, the client still gets an answer.
          log.error({ err: error, idempotency: { digest: begin.info.digest } }, 'idempotency completion failed')
          capture.send(unrecordedResponse(options.unavailableRetryAfterMs))
        },
      )
    },
    // Destroyed before it ended: nothing will be sent, and the effect is unknown (ABANDONED),
    // instead of a scope held, and renewed, for as long as the process lives.
    (error) => {
      void begin.finish({ ok: false, error: state.error ?? error })
    },
  )
  // A client that leaves does not stop the handler (as on Fastify): its answer is still
  // captured and stored when it comes, so the client's retry replays it instead of finding an
  // unknown effect. The lease stays renewed until then.
  next()
}

/**
 * The default operation, `METHOD /route/pattern` (docs/design.md §2). Mounted on a route, the pattern is
 * `req.baseUrl` + `req.route.path` (`POST /accounts/:id/deposits`); Express keeps no pattern
 * for a router's mount path, so `req.baseUrl` is the mount path as matched. Mounted on a
 * router (`router.use(idem())`), no route is known yet: the operation is `METHOD <mount path>`,
 * one scope space for every route below it (the fingerprint still tells their paths apart).
 */
function defaultOperation(req: Request, atRoute: boolean): string {
  const base = req.baseUrl ?? ''
  if (!atRoute) return `${req.method} ${base === '' ? '/' : base}`
  const path = (req.route as { path?: unknown }).path
  const pattern = typeof path === 'string' ? path : String(path)
  return `${req.method} ${base !== '' && pattern === '/' ? base : `${base}${pattern}`}`
}

/** True when the middleware runs inside the matched route's own stack (`app.post(p, idem(), h)`). */
function isRouteLevel(req: Request, middleware: RequestHandler): boolean {
  const route = req.route as { stack?: unknown } | undefined
  if (route === undefined || route === null) return false
  if (!Array.isArray(route.stack)) return true
  return route.stack.some((layer: { handle?: unknown }) => layer.handle === middleware)
}

/** `req.idempotency` is `null` on every Express request until the middleware sets it. */
function defaultRequestProperty(): void {
  if (Object.hasOwn(express.request, 'idempotency')) return
  Object.defineProperty(express.request, 'idempotency', { value: null, writable: true, configurable: true })
}
