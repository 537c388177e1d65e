/**
 * `idemkit/otel`: OpenTelemetry metrics and spans for the idempotency layer, made from its
 * diagnostics channels (see `src/core/channels.ts`). `@opentelemetry/api` is an optional peer:
 * only this entry imports it. Names follow the OpenTelemetry naming guide: the library's own
 * `idemkit.` namespace, units in UCUM, no `_total`; requests carry the HTTP server conventions'
 * attributes (`http.request.method`, `http.route`, `http.response.status_code`), store calls the
 * database client conventions' (`db.system.name`, `db.operation.name`, `server.address`,
 * `server.port`, `db.namespace`, `db.collection.name`, `error.type`).
 *
 * Metrics: `idemkit.requests` (counter), `idemkit.request.overhead` (histogram, s: what the
 * layer added to a request, its handler excluded), `idemkit.execution.duration` (histogram, s:
 * the handler), `idemkit.store.operation.duration` (histogram, s: each store call),
 * `idemkit.lease.renewals` (counter). Spans: one `idemkit <operation>` span per request, from its
 * start (`idemkit:start`, in the caller's context: a child of the active span) to its outcome, and
 * one child span per store call, named `<call> <target>` as the database conventions name them.
 */
import { subscribe, tracingChannel, unsubscribe } from 'node:diagnostics_channel'
import {
  type Attributes,
  context,
  type MeterProvider,
  metrics,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TracerProvider,
  trace,
} from '@opentelemetry/api'
import {
  EVENT_CHANNEL,
  type InvocationStart,
  OUTCOME_CHANNEL,
  START_CHANNEL,
  STORE_CHANNEL,
  type StoreCallContext,
} from '../core/channels.js'
import type { IdempotencyEvent, OutcomeEvent } from '../core/outcomes.js'
import type { StoreEndpoint } from '../core/store.js'

export interface InstrumentationOptions {
  /** @default the global MeterProvider (`metrics.getMeterProvider()`) */
  readonly meterProvider?: MeterProvider
  /** @default the global TracerProvider (`trace.getTracerProvider()`) */
  readonly tracerProvider?: TracerProvider
  /** Spans per request and per store call. @default true */
  readonly spans?: boolean
}

export interface Instrumentation {
  /** Unsubscribes from the channels: nothing is recorded any more. */
  close(): void
}

const SCOPE = 'idemkit'
/**
 * Bucket boundaries (seconds) of the request histograms: the HTTP semantic conventions' advice for
 * `http.server.request.duration`. Without advice an SDK's default boundaries (0, 5, 10, 25, ...)
 * are meant for milliseconds: every observation in seconds under 5 s would fall in one bucket.
 */
const HTTP_DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]
/**
 * The layer's own time per request: the HTTP boundaries with sub-millisecond ones below them (a
 * replay from Redis adds a few hundred microseconds).
 */
const OVERHEAD_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, ...HTTP_DURATION_BUCKETS]
/**
 * Store calls: the database semantic conventions' advice for `db.client.operation.duration`
 * (0.001 ... 10), with sub-millisecond boundaries below it (a Redis call takes 0.1-0.5 ms).
 */
const STORE_DURATION_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10]
/** The outcomes that are the layer's own errors (the request failed because of the store). */
const ERROR_OUTCOMES: ReadonlySet<string> = new Set(['STORE_UNAVAILABLE', 'UNRECORDED'])
/** `db.system.name` per store name (semantic conventions' values where there is one). */
const DB_SYSTEM: Readonly<Record<string, string>> = { redis: 'redis', postgres: 'postgresql', memory: 'memory' }
const kStarted = Symbol('idemkit.otel.started')
const kSpan = Symbol('idemkit.otel.span')

type Traced = StoreCallContext & { [kStarted]?: number; [kSpan]?: Span }

function requestAttributes(event: OutcomeEvent): Attributes {
  const attributes: Attributes = { 'idemkit.outcome': event.outcome, 'idemkit.operation': event.operation }
  if (event.route !== undefined) attributes['http.route'] = event.route
  if (event.method !== undefined) attributes['http.request.method'] = event.method
  if (event.status !== undefined) attributes['http.response.status_code'] = event.status
  return attributes
}

/** A store call's attributes, by the database client conventions. */
function storeAttributes(message: StoreCallContext): Attributes {
  const attributes: Attributes = {
    'db.system.name': DB_SYSTEM[message.store] ?? message.store,
    'db.operation.name': message.call,
  }
  const endpoint = message.endpoint
  if (endpoint !== undefined) {
    if (endpoint.address !== undefined) attributes['server.address'] = endpoint.address
    if (endpoint.port !== undefined) attributes['server.port'] = endpoint.port
    if (endpoint.namespace !== undefined) attributes['db.namespace'] = endpoint.namespace
    if (endpoint.collection !== undefined) attributes['db.collection.name'] = endpoint.collection
  }
  return attributes
}

/**
 * A store call's span name: `{db.operation.name} {target}`, the target being the table, else the
 * database, else `server.address:server.port` (the database conventions' span name).
 */
function storeSpanName(call: string, endpoint: StoreEndpoint | undefined): string {
  if (endpoint === undefined) return call
  if (endpoint.collection !== undefined) return `${call} ${endpoint.collection}`
  if (endpoint.address !== undefined) {
    return endpoint.port === undefined ? `${call} ${endpoint.address}` : `${call} ${endpoint.address}:${endpoint.port}`
  }
  return endpoint.namespace === undefined ? call : `${call} ${endpoint.namespace}`
}

/**
 * Subscribes to the library's channels and records its metrics and spans.
 * @returns a handle whose `close()` unsubscribes.
 */
export function instrumentIdempotency(options: InstrumentationOptions = {}): Instrumentation {
  const meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter(SCOPE)
  const tracer =
    options.spans === false ? undefined : (options.tracerProvider ?? trace.getTracerProvider()).getTracer(SCOPE)
  /** A counter of `unit`. */
  const counter = (name: string, unit: string, description: string) => meter.createCounter(name, { unit, description })
  /** A histogram in seconds, with its bucket boundaries as advice. */
  const seconds = (name: string, description: string, buckets: number[]) =>
    meter.createHistogram(name, { unit: 's', description, advice: { explicitBucketBoundaries: buckets } })
  const requests = counter('idemkit.requests', '{request}', 'Requests under an Idempotency-Key, by outcome.')
  const overhead = seconds(
    'idemkit.request.overhead',
    'What the idempotency layer added to a request: its store calls and decisions, the handler excluded.',
    OVERHEAD_BUCKETS,
  )
  const execution = seconds(
    'idemkit.execution.duration',
    'How long the handler of an executed request ran.',
    HTTP_DURATION_BUCKETS,
  )
  const storeDuration = seconds(
    'idemkit.store.operation.duration',
    'Duration of the idempotency store calls.',
    STORE_DURATION_BUCKETS,
  )
  const renewals = counter('idemkit.lease.renewals', '{renewal}', 'Lease renewals of running requests, by result.')
  const sweepsBehind = counter(
    'idemkit.store.sweep.behind',
    '{round}',
    'Sweeper rounds of the PostgreSQL store that ran their whole budget and left expired rows behind.',
  )

  /** The request spans begun and not yet ended, by invocation number. */
  const open = new Map<number, Span>()

  const onStart = (message: unknown) => {
    if (tracer === undefined) return
    const start = message as InvocationStart
    const attributes: Attributes = { 'idemkit.operation': start.operation, 'idemkit.digest': start.digest }
    if (start.route !== undefined) attributes['http.route'] = start.route
    if (start.method !== undefined) attributes['http.request.method'] = start.method
    // Published in the caller's async context: the active span (e.g. the HTTP server's) is the parent.
    open.set(
      start.invocation,
      tracer.startSpan(`idemkit ${start.operation}`, { kind: SpanKind.INTERNAL, attributes }, context.active()),
    )
  }

  const onOutcome = (message: unknown) => {
    const event = message as OutcomeEvent
    const attributes = requestAttributes(event)
    requests.add(1, attributes)
    overhead.record(Math.max(0, event.durationMs - (event.executionMs ?? 0)) / 1000, attributes)
    if (event.executionMs !== undefined) execution.record(event.executionMs / 1000, attributes)
    if (tracer === undefined) return
    let span = event.invocation === undefined ? undefined : open.get(event.invocation)
    if (span === undefined) {
      // Begun before the instrumentation subscribed: a span of the invocation's measured length.
      span = tracer.startSpan(`idemkit ${event.operation}`, {
        kind: SpanKind.INTERNAL,
        startTime: performance.timeOrigin + performance.now() - event.durationMs,
        attributes: { 'idemkit.digest': event.digest },
      })
    } else {
      open.delete(event.invocation as number)
    }
    span.setAttributes(attributes)
    if (event.attempt !== undefined) span.setAttribute('idemkit.attempt', event.attempt)
    if (event.reason !== undefined) span.setAttribute('idemkit.reason', event.reason)
    if (ERROR_OUTCOMES.has(event.outcome)) span.setStatus({ code: SpanStatusCode.ERROR, message: event.outcome })
    span.end()
  }

  const onEvent = (message: unknown) => {
    const event = message as IdempotencyEvent
    if (event.type === 'renewed') renewals.add(1, { 'idemkit.renewal.result': 'ok' })
    else if (event.type === 'renew-refused') renewals.add(1, { 'idemkit.renewal.result': 'refused' })
    else if (event.type === 'renew-failed') renewals.add(1, { 'idemkit.renewal.result': 'failed' })
    else if ((event as { type: string }).type === 'sweep-behind') {
      sweepsBehind.add(1, { 'db.system.name': 'postgresql' })
    }
  }

  const store = tracingChannel<unknown, Traced>(STORE_CHANNEL)
  const storeSubscribers = {
    start(message: Traced) {
      message[kStarted] = performance.now()
      if (tracer !== undefined) {
        // The request's span is the parent, whatever context the call runs in (a renewal runs
        // in the heartbeat's); without one, the active span.
        const request = message.invocation === undefined ? undefined : open.get(message.invocation)
        const parent = request === undefined ? context.active() : trace.setSpan(context.active(), request)
        message[kSpan] = tracer.startSpan(
          storeSpanName(message.call, message.endpoint),
          {
            kind: message.endpoint === undefined ? SpanKind.INTERNAL : SpanKind.CLIENT,
            attributes: { ...storeAttributes(message), 'idemkit.digest': message.digest },
          },
          parent,
        )
      }
    },
    end() {},
    asyncStart() {},
    error() {},
    asyncEnd(message: Traced) {
      const started = message[kStarted]
      if (started === undefined) return
      const attributes: Attributes = {
        'db.system.name': DB_SYSTEM[message.store] ?? message.store,
        'db.operation.name': message.call,
      }
      const endpoint = message.endpoint
      if (endpoint?.address !== undefined) attributes['server.address'] = endpoint.address
      if (endpoint?.port !== undefined) attributes['server.port'] = endpoint.port
      if (message.error !== undefined) {
        const error = message.error as { name?: unknown }
        attributes['error.type'] = typeof error.name === 'string' ? error.name : 'Error'
      }
      storeDuration.record((performance.now() - started) / 1000, attributes)
      const span = message[kSpan]
      if (span !== undefined) {
        if (message.error !== undefined) {
          span.setAttribute('error.type', String(attributes['error.type']))
          span.setStatus({ code: SpanStatusCode.ERROR, message: String(attributes['error.type']) })
        }
        span.end()
      }
    },
  }

  subscribe(START_CHANNEL, onStart)
  subscribe(OUTCOME_CHANNEL, onOutcome)
  subscribe(EVENT_CHANNEL, onEvent)
  store.subscribe(storeSubscribers)
  return {
    close() {
      unsubscribe(START_CHANNEL, onStart)
      unsubscribe(OUTCOME_CHANNEL, onOutcome)
      unsubscribe(EVENT_CHANNEL, onEvent)
      store.unsubscribe(storeSubscribers)
    },
  }
}
