/**
 * The request flow on Nest. Nest runs an interceptor before the pipes, so the interceptor only
 * takes the request as the client sent it (for the fingerprint) and opens the request's scope;
 * the claim waits for the handler itself (`@Idempotent()` wraps it), after guards and pipes,
 * so a guard's 403 or a ValidationPipe's 400 never holds a key. The response, whatever writes
 * it (Nest's reply, an exception filter, a stream), is held on the platform's Node response
 * until its completion is written, as on Express; the layer's own answers replace what Nest
 * writes after a handler that did not run.
 */
import { AsyncLocalStorage } from 'node:async_hooks'
import { IncomingMessage, type ServerResponse } from 'node:http'
import { type CallHandler, type ExecutionContext, Inject, Injectable, type NestInterceptor } from '@nestjs/common'
import { isObservable, Observable, tap } from 'rxjs'
import type { GuardInput, IdempotencyInfo } from '../../src/http/guard.js'
import { captureResponse, sendResponse } from '../../src/http/node-response.js'
import { type HttpResponse, STATUS_EXECUTED, STATUS_HEADER, unrecordedResponse } from '../../src/http/problem.js'
import { guardInput } from '../../src/http/request-input.js'
import { pinoLogger } from '../../src/http/request-logger.js'
import { kNestInfoSlot, kNestTaken } from '../../src/http/symbols.js'
import { IdempotencyRegistry, type NestRequest } from './registry.js'

/** What the interceptor hands to the handler's wrapper. */
interface RequestState {
  readonly registry: IdempotencyRegistry
  readonly handler: object
  readonly request: NestRequest
  /** The platform's Node response (`res` on Express, `reply.raw` on Fastify). */
  readonly raw: ServerResponse
  readonly input: GuardInput
  readonly operation: string
  /** Set once the wrapped handler has been called for this request. */
  called: boolean
}

/** The request whose handler is about to run (the interceptor's scope). */
const current = new AsyncLocalStorage<RequestState>()

/** The `@Idempotent()` interceptor: routes without the decorator never see it. */
export class IdempotencyInterceptor implements NestInterceptor {
  readonly #registry: IdempotencyRegistry

  constructor(registry: IdempotencyRegistry) {
    this.#registry = registry
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const handler = context.getHandler()
    const http = context.switchToHttp()
    const request = http.getRequest<NestRequest & { [kNestTaken]?: true }>()
    if (context.getType() !== 'http' || request[kNestTaken] === true || request.method === 'HEAD') return next.handle()
    const route = this.#registry.routeOf(handler)
    if (route === undefined) return next.handle()
    request[kNestTaken] = true
    const reply = http.getResponse<NestRequest>()
    const fastify = request.raw instanceof IncomingMessage
    // Taken now, before the pipes: the fingerprint is of what the client sent.
    const input = guardInput(
      {
        method: request.method,
        url: fastify ? request.url : request.originalUrl,
        headers: request.headers,
        rawHeaders: fastify ? request.raw.rawHeaders : request.rawHeaders,
        body: request.body,
      },
      route.key !== undefined,
    )
    const pattern = fastify ? request.routeOptions.url : `${request.baseUrl ?? ''}${request.route?.path ?? ''}`
    const state: RequestState = {
      registry: this.#registry,
      handler,
      request,
      raw: fastify ? reply.raw : reply,
      input,
      operation: `${request.method} ${pattern}`,
      called: false,
    }
    if (fastify) {
      // Headers Fastify holds until it writes (CORS, ...) go on the Node response now, so the
      // layer's own answers keep them, as on the Fastify plugin.
      for (const [name, value] of Object.entries(reply.getHeaders())) state.raw.setHeader(name, value as string)
    }
    return new Observable((subscriber) => current.run(state, () => next.handle().subscribe(subscriber)))
  }
}
Injectable()(IdempotencyInterceptor)
Inject(IdempotencyRegistry)(IdempotencyInterceptor, undefined, 0)

/** Wraps an `@Idempotent()` handler: it claims first, then runs once, or answers without running. */
export function guardedHandler(
  original: (...args: unknown[]) => unknown,
  key: string | symbol,
): (...args: unknown[]) => unknown {
  const guarded = function (this: unknown, ...args: unknown[]): unknown {
    const state = current.getStore()
    // Called outside a request of its own route (a direct call, a test): a plain call.
    if (state === undefined || state.called) return original.apply(this, args)
    state.called = true
    const call = (info: IdempotencyInfo | null) =>
      original.apply(
        this,
        args.map((arg) => (arg === kNestInfoSlot ? info : arg)),
      )
    return runGuarded(state, call, () => repliesItself(this, key))
  }
  Object.defineProperty(guarded, 'name', { value: original.name })
  return guarded
}

/** What `@IdempotencyInfo()` gives a handler's parameter before the handler runs. */
export function infoParameter(request: NestRequest): unknown {
  return current.getStore()?.request === request ? kNestInfoSlot : (request.idempotency ?? null)
}

async function runGuarded(
  state: RequestState,
  call: (info: IdempotencyInfo | null) => unknown,
  handledByHandler: () => boolean,
): Promise<unknown> {
  const { registry, request, raw } = state
  const route = registry.routeOf(state.handler)
  if (route === undefined) return call(null)
  // A pino-style `request.log` (Fastify's, or pino-http's on Express) when there is one.
  const log = pinoLogger(request.log) ?? registry.log
  const begun = await registry.guardOf(state.handler, route, state.operation).begin(request, state.input, log)
  if (begun.kind === 'pass') {
    request.idempotency = null
    return call(null)
  }
  if (begun.kind === 'respond') {
    request.idempotency = begun.info ?? null
    // The handler does not run: what Nest writes in its place is replaced by the answer, or,
    // for a handler that sends its response itself (Nest then sends nothing), it is sent now.
    if (handledByHandler()) sendResponse(raw, begun.response)
    else replaceResponse(raw, begun.response)
    return undefined
  }
  request.idempotency = begun.info
  // Set before the capture: a replacement answer keeps it, with its own value.
  raw.setHeader(STATUS_HEADER, STATUS_EXECUTED)
  let error: unknown
  const capture = captureResponse(
    raw,
    route.storedHeaders,
    (captured) => {
      begun.finish({ ok: true, value: { ...captured, error } }).then(
        (replacement) => capture.send(replacement),
        () => capture.send(unrecordedResponse(registry.options.unavailableRetryAfterMs)),
      )
    },
    // Destroyed before it ended: no answer will come, and the effect is unknown.
    (destroyed) => void begun.finish({ ok: false, error: error ?? destroyed }),
  )
  const remember = (thrown: unknown) => {
    error = thrown
  }
  try {
    const result = await call(begun.info)
    // An Observable's error is the handler's as well (an exception filter answers it).
    return isObservable(result) ? result.pipe(tap({ error: remember })) : result
  } catch (thrown) {
    remember(thrown)
    throw thrown
  }
}

function replaceResponse(raw: ServerResponse, response: HttpResponse): void {
  const capture = captureResponse(raw, [], () => capture.send(response), noop)
}

function noop(): void {}

/**
 * Nest's metadata keys and parameter types for `@Res()` and `@Next()`, the same values in Nest
 * 10, 11 and 12; written here because Nest 12 moved them to `@nestjs/common/internal`, which
 * Nest 10 and 11 do not have (and Nest marks internal).
 */
const ROUTE_ARGS_METADATA = '__routeArguments__'
const RESPONSE_PASSTHROUGH_METADATA = '__responsePassthrough__'
const RESPONSE_PARAMTYPE = '1'
const NEXT_PARAMTYPE = '2'

/** Nest's rule: a handler taking `@Res()` or `@Next()` without `passthrough` sends its own response. */
function repliesItself(instance: unknown, key: string | symbol): boolean {
  const host = (instance as { constructor: object }).constructor
  const params = (Reflect.getMetadata(ROUTE_ARGS_METADATA, host, key) ?? {}) as Record<string, unknown>
  const own = [RESPONSE_PARAMTYPE, NEXT_PARAMTYPE]
  const takesResponse = Object.keys(params).some((name) => own.includes(name.split(':')[0] as string))
  return takesResponse && Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, host, key) !== true
}
