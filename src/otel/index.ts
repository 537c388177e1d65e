/**
 * `idemkit/otel`: OpenTelemetry metrics and spans for the idempotency layer, made from its
 * diagnostics channels (see `src/core/channels.ts`). `@opentelemetry/api` is an optional peer:
 * only this entry imports it. Names follow the OpenTelemetry naming guide: the library's own
 * `idemkit.` namespace, units in UCUM, no `_total`; store calls use the database semantic
 * conventions (`db.system.name`, `db.operation.name`).
 *
 * Metrics: `idemkit.requests` (counter), `idemkit.request.overhead` (histogram, s: what the
 * layer added to a request, its handler excluded), `idemkit.execution.duration` (histogram, s:
 * the handler), `idemkit.store.operation.duration` (histogram, s: each store call),
 * `idemkit.lease.renewals` (counter). Spans: one `idemkit <operation>` span per request, ending
 * with its outcome, and one `idemkit.store <call>` child span per store call.
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
import { EVENT_CHANNEL, OUTCOME_CHANNEL, STORE_CHANNEL, type StoreCallContext } from '../core/channels.js'
import type { IdempotencyEvent, OutcomeEvent } from '../core/outcomes.js'

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
  return attributes
}

/**
 * Subscribes to the library's channels and records its metrics and spans.
 * @returns a handle whose `close()` unsubscribes.
 */
export function instrumentIdempotency(options: InstrumentationOptions = {}): Instrumentation {
  const meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter(SCOPE)
  const tracer =
    options.spans === false ? undefined : (options.tracerProvider ?? trace.getTracerProvider()).getTracer(SCOPE)
  const requests = meter.createCounter('idemkit.requests', {
    unit: '{request}',
    description: 'Requests under an Idempotency-Key, by outcome.',
  })
  const overhead = meter.createHistogram('idemkit.request.overhead', {
    unit: 's',
    description: 'What the idempotency layer added to a request: its store calls and decisions, the handler excluded.',
    advice: { explicitBucketBoundaries: OVERHEAD_BUCKETS },
  })
  const execution = meter.createHistogram('idemkit.execution.duration', {
    unit: 's',
    description: 'How long the handler of an executed request ran.',
    advice: { explicitBucketBoundaries: HTTP_DURATION_BUCKETS },
  })
  const storeDuration = meter.createHistogram('idemkit.store.operation.duration', {
    unit: 's',
    description: 'Duration of the idempotency store calls.',
    advice: { explicitBucketBoundaries: STORE_DURATION_BUCKETS },
  })
  const renewals = meter.createCounter('idemkit.lease.renewals', {
    unit: '{renewal}',
    description: 'Lease renewals of running requests, by result.',
  })
  const sweepsBehind = meter.createCounter('idemkit.store.sweep.behind', {
    unit: '{round}',
    description: 'Sweeper rounds of the PostgreSQL store that ran their whole budget and left expired rows behind.',
  })

  const onOutcome = (message: unknown) => {
    const event = message as OutcomeEvent
    const attributes = requestAttributes(event)
    requests.add(1, attributes)
    overhead.record(Math.max(0, event.durationMs - (event.executionMs ?? 0)) / 1000, attributes)
    if (event.executionMs !== undefined) execution.record(event.executionMs / 1000, attributes)
    if (tracer !== undefined) {
      const span = tracer.startSpan(`idemkit ${event.operation}`, {
        kind: SpanKind.INTERNAL,
        startTime: performance.timeOrigin + performance.now() - event.durationMs,
        attributes: {
          ...attributes,
          'idemkit.digest': event.digest,
          ...(event.attempt === undefined ? {} : { 'idemkit.attempt': event.attempt }),
          ...(event.reason === undefined ? {} : { 'idemkit.reason': event.reason }),
        },
      })
      if (ERROR_OUTCOMES.has(event.outcome)) span.setStatus({ code: SpanStatusCode.ERROR, message: event.outcome })
      span.end()
    }
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
        message[kSpan] = tracer.startSpan(
          `idemkit.store ${message.call}`,
          {
            kind: SpanKind.CLIENT,
            attributes: {
              'db.system.name': DB_SYSTEM[message.store] ?? message.store,
              'db.operation.name': message.call,
              'idemkit.digest': message.digest,
            },
          },
          context.active(),
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
      if (message.error !== undefined) {
        const error = message.error as { name?: unknown }
        attributes['error.type'] = typeof error.name === 'string' ? error.name : 'Error'
      }
      storeDuration.record((performance.now() - started) / 1000, attributes)
      const span = message[kSpan]
      if (span !== undefined) {
        if (message.error !== undefined)
          span.setStatus({ code: SpanStatusCode.ERROR, message: String(attributes['error.type']) })
        span.end()
      }
    },
  }

  subscribe(OUTCOME_CHANNEL, onOutcome)
  subscribe(EVENT_CHANNEL, onEvent)
  store.subscribe(storeSubscribers)
  return {
    close() {
      unsubscribe(OUTCOME_CHANNEL, onOutcome)
      unsubscribe(EVENT_CHANNEL, onEvent)
      store.unsubscribe(storeSubscribers)
    },
  }
}
