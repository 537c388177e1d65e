/**
 * The Fastify plugin: resolves each annotated route once in `onRoute`, claims in `preHandler`
 * (after authentication and validation, so a 400 never holds a key), and writes the completion
 * in `onSend`, before the response leaves (docs/design.md §5).
 */
import { Readable } from 'node:stream'
import type {
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  RouteOptions as FastifyRouteOptions,
  onErrorHookHandler,
  onRequestHookHandler,
  onSendHookHandler,
  preHandlerHookHandler,
  preValidationHookHandler,
} from 'fastify'
import fp from 'fastify-plugin'
import { createRouteGuard, type GuardInput, type GuardRun, type RouteGuard } from '../../src/http/guard.js'
import { type IdempotencyOptions, parseOptions, type ResolvedOptions } from '../../src/http/options.js'
import {
  type HttpResponse,
  ProblemCode,
  problemResponse,
  STATUS_EXECUTED,
  STATUS_HEADER,
} from '../../src/http/problem.js'
import { guardInput } from '../../src/http/request-input.js'
import { storedOf } from '../../src/http/response-codec.js'
import { type ResolvedRoute, type RouteOptions, resolveRoute } from '../../src/http/route-options.js'
import { reportStore } from '../../src/http/startup.js'
import { kFastifyRequestState, kFastifyRouteResolved } from '../../src/http/symbols.js'
import './augment.js'
import { documentRoutes } from './openapi.js'

/** Plugin options: the shared options, with Fastify's request type. */
export type FastifyIdempotencyOptions = IdempotencyOptions<FastifyRequest>
/** Route options: `config: { idempotency: true | FastifyIdempotencyRouteOptions }`. */
export type FastifyIdempotencyRouteOptions = RouteOptions<FastifyRequest>

/** What one request carries from hook to hook. */
class RequestState {
  /** The request as the client sent it, taken before validation (preValidation). */
  input: GuardInput
  /** The run, from the claim until its response is recorded. */
  run: GuardRun | undefined = undefined
  /** Names of the headers set before the handler ran: a replacement answer keeps only these. */
  before: readonly string[] | undefined = undefined
  error: unknown = undefined

  constructor(input: GuardInput) {
    this.input = input
  }
}

type WithState = FastifyRequest & { [kFastifyRequestState]?: RequestState }
type ConfigWithRoute = { idempotency?: unknown; [kFastifyRouteResolved]?: true }

async function idempotency(fastify: FastifyInstance, input: FastifyIdempotencyOptions): Promise<void> {
  const options = parseOptions(input)

  fastify.decorateRequest('idempotency', null)
  // The protected routes' contract in @fastify/swagger's document, when it is registered.
  const document = documentRoutes(fastify)
  // The startup report, once the app is ready; it never holds the start up.
  fastify.addHook('onReady', function idempotencyStartupReport(done) {
    void reportStore(options.store, fastify.log)
    done()
  })

  fastify.addHook('onRoute', function idempotencyOnRoute(route) {
    const config = route.config as ConfigWithRoute | undefined
    const annotation = config?.idempotency
    if (config === undefined || annotation === undefined || annotation === false) {
      if (options.unannotatedKey === 'warn' && !toArray(route.method).every((method) => SAFE_METHODS.has(method))) {
        route.onRequest = [...toArray(route.onRequest), unannotatedKeyWarning(route.url)]
      }
      return
    }
    const resolved = resolveRoute(
      annotation as true | FastifyIdempotencyRouteOptions,
      options.route,
      `route ${route.url}: `,
    )
    config[kFastifyRouteResolved] = true
    // A context above this one may have marked the route as unseen before this hook ran.
    if (toArray(route.onRequest).includes(idempotencyUnprotectedCheck)) {
      route.onRequest = toArray(route.onRequest).filter((hook) => hook !== idempotencyUnprotectedCheck)
    }
    // HEAD is safe and carries no body: Fastify's automatic HEAD twin of a GET stays as it is.
    if (route.method === 'HEAD') return
    document(route, {
      keyHeader: resolved.key === undefined,
      required: resolved.required,
      anonymous: options.anonymous,
    })
    const hooks = routeHooks(options, resolved, route)
    // The fingerprint is taken before schema validation, which may remove, coerce or default
    // members of the body or the headers in place (Ajv's removeAdditional, coerceTypes,
    // useDefaults); the claim waits for preHandler, after validation and authentication. A route
    // that validates neither and has no hooks of its own before the claim reads the request in
    // preHandler: one hook pass less per request, the same input.
    if (readsBeforeValidation(route)) {
      route.preValidation = [hooks.preValidation, ...toArray(route.preValidation)]
    }
    route.preHandler = [...toArray(route.preHandler), hooks.preHandler]
    route.onError = [...toArray(route.onError), idempotencyOnError]
    route.onSend = [...toArray(route.onSend), hooks.onSend]
    // No onResponse hook: a route-level onResponse makes Fastify watch every response of the
    // route and run one more hook pass per request; the claim watches its own response instead
    // (watchUnseen), only when a run was claimed.
  })

  // An annotated route this plugin never sees (added before it, or in a context above or beside
  // it) must not run unprotected: it fails loudly instead (500 + an error log line). When the app
  // has no route yet, every later route is added in this context (seen above), below it, or in a
  // context that takes its onRoute hooks from one of the contexts above it: those get an onRoute
  // hook that gives such a route the check, and no other route pays for it. When routes exist
  // already, the root context's onRequest hook checks every request, as it must.
  const root = rootOf(fastify)
  if (!checkedRoots.has(root)) {
    checkedRoots.add(root)
    if (hasNoRoutes(root)) {
      for (let context = fastify; context !== root; ) {
        context = Object.getPrototypeOf(context) as FastifyInstance
        context.addHook('onRoute', idempotencyUnseenRoute)
      }
    } else {
      root.addHook('onRequest', idempotencyUnprotectedCheck)
    }
  }
}

/** Methods whose requests need no key (RFC 9110 §9.2.1): a key there is not worth a warning. */
const SAFE_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE'])

/**
 * `unannotatedKey: 'warn'`: a route without `config.idempotency` that gets a request with an
 * Idempotency-Key says once that the key is not honoured there; the request goes on unprotected.
 */
function unannotatedKeyWarning(url: string): onRequestHookHandler {
  let warned = false
  return function idempotencyUnannotatedKey(request, _reply, done) {
    if (!warned && request.headers['idempotency-key'] !== undefined) {
      warned = true
      request.log.warn(
        { idempotency: { route: url } },
        'request with an Idempotency-Key on a route without config.idempotency: it runs unprotected; annotate the route with config: { idempotency: true }',
      )
    }
    done()
  }
}

/**
 * Whether no route has been added to the app yet. `printRoutes()` is find-my-way's text of the
 * whole router: '(empty tree)' for none. Any other text keeps the check on every request, the
 * safe side.
 */
function hasNoRoutes(app: FastifyInstance): boolean {
  return app.printRoutes() === '(empty tree)'
}

/** An annotated route added where the plugin does not see it: it is refused at every request. */
function idempotencyUnseenRoute(route: FastifyRouteOptions): void {
  const config = route.config as ConfigWithRoute | undefined
  if (config === undefined || config.idempotency === undefined || config.idempotency === false) return
  if (config[kFastifyRouteResolved] !== undefined) return
  route.onRequest = [idempotencyUnprotectedCheck, ...toArray(route.onRequest)]
}

/**
 * Whether the request must be read in preValidation: when the route validates the body or the
 * headers (validation may change them in place) or has preValidation or preHandler hooks of its
 * own, which run between the two points and may change the body.
 */
function readsBeforeValidation(route: FastifyRouteOptions): boolean {
  const schema = route.schema as { body?: unknown; headers?: unknown } | undefined
  return (
    schema?.body !== undefined ||
    schema?.headers !== undefined ||
    toArray(route.preValidation).length > 0 ||
    toArray(route.preHandler).length > 0
  )
}

/** Roots that already carry the unprotected-route check (one per app, however often registered). */
const checkedRoots = new WeakSet<FastifyInstance>()

/** Fastify builds each encapsulated context with `Object.create(parent)`: walk up to the root. */
function rootOf(instance: FastifyInstance): FastifyInstance {
  let root = instance
  for (;;) {
    const parent = Object.getPrototypeOf(root) as FastifyInstance | null
    if (parent === null || typeof parent.addHook !== 'function') return root
    root = parent
  }
}

/**
 * A callback-style hook (no promise per request): on an unseen annotated route, or, when routes
 * existed before the plugin, on every route of the app, most of which are not annotated and pay
 * one property read here.
 */
function idempotencyUnprotectedCheck(request: FastifyRequest, reply: FastifyReply, done: () => void): void {
  const config = request.routeOptions.config as ConfigWithRoute
  if (config.idempotency === undefined || config.idempotency === false || config[kFastifyRouteResolved] !== undefined) {
    done()
    return
  }
  request.log.error(
    { idempotency: { route: request.routeOptions.url } },
    'idempotent route was registered before the idempotency plugin (or outside its scope) and is refused',
  )
  sendResponse(
    reply,
    problemResponse(
      ProblemCode.ROUTE_UNPROTECTED,
      'This route asks for idempotency but was registered where the idempotency plugin cannot see it.',
    ),
  )
}

/**
 * The hooks of one route, built once when the route is added: its guards (one per method) and
 * its stored-header names are closed over, so a request looks nothing up.
 */
function routeHooks(
  options: ResolvedOptions<FastifyRequest>,
  route: ResolvedRoute<FastifyRequest>,
  added: FastifyRouteOptions,
) {
  const methods = toArray(added.method)
  const guards = new Map(methods.map((method) => [method, createRouteGuard(options, route, `${method} ${added.url}`)]))
  const only = methods.length === 1 ? guards.get(methods[0] as string) : undefined
  const storedHeaders = route.storedHeaders
  const keyed = route.key !== undefined

  const preValidation: preValidationHookHandler = function idempotencyPreValidation(request, _reply, done) {
    ;(request as WithState)[kFastifyRequestState] = new RequestState(inputOf(request, keyed))
    done()
  }

  const preHandler: preHandlerHookHandler = async function idempotencyPreHandler(request, reply) {
    const guard = only ?? (guards.get(request.method) as RouteGuard<FastifyRequest>)
    let state = (request as WithState)[kFastifyRequestState]
    if (state === undefined) {
      state = new RequestState(inputOf(request, keyed))
      ;(request as WithState)[kFastifyRequestState] = state
    }
    const begun = await guard.begin(request, state.input, request.log)
    if (begun.kind === 'pass') return
    if (begun.kind === 'respond') {
      if (begun.info !== undefined) request.idempotency = begun.info
      return sendResponse(reply, begun.response)
    }
    request.idempotency = begun.info
    state.run = begun
    // Set before the handler: a replacement answer keeps it, with its own value.
    reply.header(STATUS_HEADER, STATUS_EXECUTED)
    state.before = Object.keys(reply.getHeaders())
    watchUnseen(reply, state)
  }

  const onSend: onSendHookHandler = function idempotencyOnSend(request, reply, payload, done) {
    const state = (request as WithState)[kFastifyRequestState]
    const run = state?.run
    if (state === undefined || run === undefined) {
      done(null, payload)
      return
    }
    state.run = undefined
    const record = ({ body, send }: Payload) =>
      run
        .finish({
          ok: true,
          value: {
            status: reply.statusCode,
            headers: storedOf(storedHeaders, (name) => reply.getHeader(name)),
            body,
            error: state.error,
          },
        })
        .then((replacement) => ({ send, replacement }))
    const captured = capturePayload(payload)
    const recorded =
      captured instanceof Promise
        ? captured.then(record, (error: unknown) =>
            // The stream failed while it was read: what the client got is unknown, and the
            // execution must still end (ABANDONED), or it would hold the scope for good.
            run.finish({ ok: false, error }).then(() => Promise.reject(error)),
          )
        : record(captured)
    recorded.then(
      ({ send, replacement }) => {
        if (replacement === undefined) {
          done(null, send)
          return
        }
        // The handler's headers (Location, ETag, ...) belong to the answer that is not sent.
        const before = state.before ?? []
        for (const name of Object.keys(reply.getHeaders())) {
          if (before.includes(name)) continue
          reply.removeHeader(name)
          reply.raw.removeHeader(name)
        }
        reply.code(replacement.status)
        reply.removeHeader('content-length')
        reply.headers({ ...replacement.headers })
        done(null, replacement.body)
      },
      (error: Error) => done(error),
    )
  }

  return { preValidation, preHandler, onSend }
}

function inputOf(request: FastifyRequest, keyed: boolean): GuardInput {
  return guardInput(
    {
      method: request.method,
      url: request.url,
      headers: request.headers,
      rawHeaders: request.raw.rawHeaders,
      body: request.body,
    },
    keyed,
  )
}

// The hooks below are callback-style where they can answer at once: no promise per request on
// the paths that have nothing to record.

const idempotencyOnError: onErrorHookHandler = function idempotencyOnError(request, _reply, error, done) {
  const state = (request as WithState)[kFastifyRequestState]
  if (state !== undefined) state.error = error
  done()
}

/**
 * Ends a claimed run whose response leaves without passing onSend (a hijacked reply written
 * around Fastify): its effect is unknown. It listens where Fastify's onResponse does ('finish'
 * and 'error' of the Node response), so it fires in the same cases; a run that onSend saw has
 * been taken off the state by then and nothing happens.
 */
function watchUnseen(reply: FastifyReply, state: RequestState): void {
  const raw = reply.raw
  const unseen = () => {
    raw.removeListener('finish', unseen)
    raw.removeListener('error', unseen)
    const run = state.run
    if (run === undefined) return
    state.run = undefined
    run
      .finish({ ok: false, error: state.error ?? new Error('The response was not seen by the idempotency layer.') })
      .then(noop, noop)
  }
  raw.on('finish', unseen)
  raw.on('error', unseen)
}

function noop(): void {}

/** A reply payload as bytes to store and the payload to send on. */
type Payload = { body: Buffer; send: unknown }

/**
 * Turns an onSend payload into bytes to store and the payload to send on: at once for a string
 * or bytes; a stream is read to the end (it must be, to store it) and sent on as the same bytes.
 */
function capturePayload(payload: unknown): Payload | Promise<Payload> {
  if (payload === undefined || payload === null) return { body: Buffer.alloc(0), send: payload }
  if (typeof payload === 'string') return { body: Buffer.from(payload, 'utf8'), send: payload }
  if (Buffer.isBuffer(payload)) return { body: payload, send: payload }
  if (payload instanceof Uint8Array) return { body: Buffer.from(payload), send: payload }
  if (payload instanceof Readable || isAsyncIterable(payload)) return readAll(payload as AsyncIterable<unknown>)
  return { body: Buffer.from(String(payload)), send: payload }
}

async function readAll(payload: AsyncIterable<unknown>): Promise<Payload> {
  const chunks: Buffer[] = []
  for await (const chunk of payload) {
    chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk as Uint8Array))
  }
  const body = Buffer.concat(chunks)
  return { body, send: body }
}

function isAsyncIterable(value: unknown): boolean {
  return typeof value === 'object' && value !== null && Symbol.asyncIterator in value
}

function sendResponse(reply: FastifyReply, response: HttpResponse): FastifyReply {
  return reply
    .code(response.status)
    .headers({ ...response.headers })
    .send(response.body)
}

function toArray<T>(value: T | T[] | undefined): T[] {
  if (value === undefined) return []
  return Array.isArray(value) ? value : [value]
}

/** The Fastify plugin. Register it before the routes it protects. */
export const fastifyIdempotency = fp(idempotency, { fastify: '4.x || 5.x', name: 'idemkit' })
