/**
 * `idemkit/otel` with the OpenTelemetry SDK's in-memory reader and span exporter: each outcome
 * (201, replay, 409, 422, 503 with the store down) counted with its attributes, the store calls
 * timed with the database conventions, lease renewals counted, a span per request and per store
 * call; after `close()` nothing more is recorded.
 */
import { randomUUID } from 'node:crypto'
import {
  type DataPoint,
  type Histogram,
  MeterProvider,
  MetricReader,
  type ResourceMetrics,
} from '@opentelemetry/sdk-metrics'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import Fastify, { type FastifyInstance } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { type Instrumentation, instrumentIdempotency } from '../../src/otel/index.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { SECRET } from '../helpers/example-app.js'
import { type FaultyStore, faultyStore } from '../helpers/faulty-store.js'
import { sleep } from '../helpers/sleep.js'

/** A reader the test collects from itself. */
class TestReader extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

function points(metrics: ResourceMetrics, name: string): DataPoint<number | Histogram>[] {
  for (const scope of metrics.scopeMetrics) {
    for (const metric of scope.metrics) if (metric.descriptor.name === name) return metric.dataPoints as never
  }
  return []
}

describe('idemkit/otel', () => {
  let app: FastifyInstance
  let store: FaultyStore
  let reader: TestReader
  let meterProvider: MeterProvider
  let exporter: InMemorySpanExporter
  let tracerProvider: BasicTracerProvider
  let instrumentation: Instrumentation

  beforeAll(async () => {
    reader = new TestReader()
    meterProvider = new MeterProvider({ readers: [reader] })
    exporter = new InMemorySpanExporter()
    tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
    instrumentation = instrumentIdempotency({ meterProvider, tracerProvider })
    store = faultyStore(memoryStore())
    app = Fastify()
    await app.register(fastifyIdempotency, {
      store,
      secrets: { current: 1, keys: { 1: SECRET } },
      principal: () => 'alice',
      leaseMs: 300,
    })
    app.post('/orders', { config: { idempotency: true } }, async (request, reply) => {
      await sleep(Number(request.headers['x-hold-ms'] ?? 0))
      return reply.code(201).send({ ok: true })
    })
    await app.ready()
  })

  afterAll(async () => {
    instrumentation.close()
    await app.close()
    await store.close()
    await meterProvider.shutdown()
    await tracerProvider.shutdown()
  })

  const post = (key: string, body: unknown, holdMs = 0) =>
    app.inject({
      method: 'POST',
      url: '/orders',
      headers: { 'idempotency-key': key, 'x-hold-ms': String(holdMs) },
      payload: body as object,
    })

  it('records every outcome, the store calls, the renewals and a span per request', async () => {
    const key = randomUUID()
    expect((await post(key, { n: 1 })).statusCode).toBe(201)
    expect((await post(key, { n: 1 })).statusCode).toBe(201)
    expect((await post(key, { n: 2 })).statusCode).toBe(422)
    const slowKey = randomUUID()
    const slow = post(slowKey, { n: 1 }, 450)
    await sleep(100)
    expect((await post(slowKey, { n: 1 })).statusCode).toBe(409)
    expect((await slow).statusCode).toBe(201)
    store.inject('claim', 'not-sent')
    expect((await post(randomUUID(), { n: 1 })).statusCode).toBe(503)

    const { resourceMetrics } = await reader.collect()
    const requests = points(resourceMetrics, 'idemkit.requests')
    const byOutcome = Object.fromEntries(
      requests.map((point) => [String(point.attributes['idemkit.outcome']), point.value as number]),
    )
    expect(byOutcome).toEqual({
      EXECUTED: 2,
      REPLAYED: 1,
      FINGERPRINT_MISMATCH: 1,
      IN_PROGRESS: 1,
      STORE_UNAVAILABLE: 1,
    })
    for (const point of requests) {
      expect(point.attributes).toMatchObject({
        'http.route': '/orders',
        'http.request.method': 'POST',
        'idemkit.operation': 'POST /orders',
      })
    }
    const execution = points(resourceMetrics, 'idemkit.execution.duration')
    const executed = execution[0]?.value as Histogram | undefined
    expect(executed?.count).toBe(2)
    expect(executed?.max).toBeGreaterThanOrEqual(0.4)
    const overhead = points(resourceMetrics, 'idemkit.request.overhead')
    expect(overhead.reduce((sum, point) => sum + (point.value as Histogram).count, 0)).toBe(6)

    const storeCalls = points(resourceMetrics, 'idemkit.store.operation.duration')
    const calls = Object.fromEntries(
      storeCalls.map((point) => [
        `${point.attributes['db.operation.name']}${point.attributes['error.type'] ? ` ${point.attributes['error.type']}` : ''}`,
        (point.value as Histogram).count,
      ]),
    )
    expect(calls).toMatchObject({ claim: 5, complete: 2, 'claim StoreUnavailableError': 1 })
    // The test's fault-injecting wrapper names itself after the memory store it wraps.
    expect(new Set(storeCalls.map((point) => point.attributes['db.system.name']))).toEqual(new Set(['faulty(memory)']))
    const renewals = points(resourceMetrics, 'idemkit.lease.renewals')
    expect(renewals.find((point) => point.attributes['idemkit.renewal.result'] === 'ok')?.value).toBeGreaterThanOrEqual(
      1,
    )

    const spans = exporter.getFinishedSpans()
    const requestSpans = spans.filter((span) => span.name === 'idemkit POST /orders')
    expect(requestSpans.map((span) => span.attributes['idemkit.outcome']).sort()).toEqual(
      ['EXECUTED', 'EXECUTED', 'FINGERPRINT_MISMATCH', 'IN_PROGRESS', 'REPLAYED', 'STORE_UNAVAILABLE'].sort(),
    )
    // A store call's span is named by the database conventions: `{db.operation.name} {target}`, and
    // the memory store (behind the test's wrapper) has no server to name.
    expect(spans.filter((span) => span.name === 'claim').length).toBe(6)
  })

  it('records nothing after close()', async () => {
    instrumentation.close()
    const before = await reader.collect()
    const count = (metrics: ResourceMetrics) =>
      points(metrics, 'idemkit.requests').reduce((sum, point) => sum + (point.value as number), 0)
    await post(randomUUID(), { n: 1 })
    const after = await reader.collect()
    expect(count(after.resourceMetrics)).toBe(count(before.resourceMetrics))
  })
})
