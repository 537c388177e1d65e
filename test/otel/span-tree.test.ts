/**
 * `idemkit/otel`'s spans read from the SDK, on a listening Fastify server whose requests run in
 * an HTTP server span (as an HTTP instrumentation makes one): the request's span is that span's
 * child and the parent of every store call's span (claim, complete, the renewals made while the
 * handler runs), and spans the store calls in time. Without a context manager one request is one
 * trace. Store spans carry the database conventions' `server.address`/`server.port`, and
 * `idemkit.requests` the HTTP status, so a replayed 402 is told from a replayed 201.
 */
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { context, SpanKind, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { type DataPoint, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics'
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base'
import Fastify, { type FastifyInstance } from 'fastify'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { type Instrumentation, instrumentIdempotency } from '../../src/otel/index.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { SECRET } from '../helpers/example-app.js'
import { sleep } from '../helpers/sleep.js'
import { createPostgresStore, createRedisStore, type TestStore } from '../helpers/stores.js'

class TestReader extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

const exporter = new InMemorySpanExporter()
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
const serverTracer = tracerProvider.getTracer('test-http-server')

/** A Fastify app whose every request runs inside an HTTP server span, as `@opentelemetry/instrumentation-http` makes. */
async function tracedApp(store: IdempotencyStore, leaseMs = 10_000): Promise<{ app: FastifyInstance; url: string }> {
  const app = Fastify({
    serverFactory: (handler) =>
      createServer((request: IncomingMessage, response: ServerResponse) => {
        const span = serverTracer.startSpan(`${request.method} server`, { kind: SpanKind.SERVER })
        response.once('close', () => span.end())
        context.with(trace.setSpan(context.active(), span), () => handler(request, response))
      }),
  })
  await app.register(fastifyIdempotency, {
    store,
    secrets: { current: 1, keys: { 1: SECRET } },
    principal: () => 'alice',
    leaseMs,
  })
  app.post('/orders', { config: { idempotency: true } }, async (request, reply) => {
    const body = request.body as { holdMs?: number; status?: number }
    await sleep(body.holdMs ?? 0)
    return reply.code(body.status ?? 201).send({ ok: true })
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` }
}

function post(url: string, key: string, body: object): Promise<Response> {
  return fetch(`${url}/orders`, {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
}

const idOf = (span: ReadableSpan) => span.spanContext().spanId
const traceOf = (span: ReadableSpan) => span.spanContext().traceId
/** How far apart two spans' clocks can be: the SDK's Date.now() anchor is whole milliseconds. */
const ANCHOR_NS = 1_000_000n
const nanos = (time: [number, number]) => BigInt(time[0]) * 1_000_000_000n + BigInt(time[1])

/** The spans of one request: the request span, its store spans, the server span if any. */
function spansOf(digestOrAll: ReadableSpan[]) {
  const request = digestOrAll.filter((span) => span.name === 'idemkit POST /orders')
  const store = digestOrAll.filter((span) => span.attributes['db.operation.name'] !== undefined)
  const server = digestOrAll.filter((span) => span.name === 'POST server')
  return { request, store, server }
}

describe('idemkit/otel spans', () => {
  let instrumentation: Instrumentation

  beforeAll(() => {
    instrumentation = instrumentIdempotency({ tracerProvider, meterProvider: new MeterProvider() })
  })

  afterAll(async () => {
    instrumentation.close()
    await tracerProvider.shutdown()
  })

  beforeEach(() => {
    exporter.reset()
  })

  describe('with an AsyncLocalStorageContextManager and an HTTP server span, on Redis', () => {
    let backing: TestStore
    let app: FastifyInstance
    let url: string
    const manager = new AsyncLocalStorageContextManager()

    beforeAll(async () => {
      context.setGlobalContextManager(manager.enable())
      backing = await createRedisStore()
      ;({ app, url } = await tracedApp(backing.store, 300))
    })

    afterAll(async () => {
      await app.close()
      await backing.teardown()
      context.disable()
    })

    it('nests the store calls, renewals included, in the request span, itself a child of the server span', async () => {
      const response = await post(url, randomUUID(), { holdMs: 400 })
      expect(response.status).toBe(201)
      await expect.poll(() => spansOf(exporter.getFinishedSpans()).server.length, { timeout: 10_000 }).toBe(1)

      const { request, store, server } = spansOf(exporter.getFinishedSpans())

      expect(request).toHaveLength(1)
      const [requestSpan, serverSpan] = [request[0] as ReadableSpan, server[0] as ReadableSpan]
      expect(requestSpan.parentSpanContext?.spanId).toBe(idOf(serverSpan))
      expect(traceOf(requestSpan)).toBe(traceOf(serverSpan))
      const calls = store.map((span) => span.attributes['db.operation.name'])
      expect(calls).toContain('claim')
      expect(calls).toContain('complete')
      // A 300 ms lease renews every 100 ms: a 400 ms handler sees renewals, in the heartbeat's context.
      expect(calls).toContain('renew')
      for (const span of store) {
        expect(span.parentSpanContext?.spanId).toBe(idOf(requestSpan))
        expect(traceOf(span)).toBe(traceOf(serverSpan))
        expect(nanos(span.startTime)).toBeGreaterThanOrEqual(nanos(requestSpan.startTime))
      }
      const complete = store.find((span) => span.attributes['db.operation.name'] === 'complete') as ReadableSpan
      // The simple processor exports a span when it ends: the completion ended before the request.
      const ended = exporter.getFinishedSpans()
      expect(ended.indexOf(complete)).toBeLessThan(ended.indexOf(requestSpan))
      // The SDK anchors each span on Date.now() when it starts (whole milliseconds) and adds
      // performance.now() durations to it, so two spans' end times compare only to within 1 ms.
      expect(nanos(requestSpan.endTime) + ANCHOR_NS).toBeGreaterThanOrEqual(nanos(complete.endTime))
    })

    it('names the Redis server on the store spans by the database conventions', async () => {
      const redisUrl = new URL(inject('redisUrl'))

      await post(url, randomUUID(), {})

      const claim = exporter.getFinishedSpans().find((span) => span.attributes['db.operation.name'] === 'claim')
      expect(claim?.kind).toBe(SpanKind.CLIENT)
      expect(claim?.name).toBe(`claim ${redisUrl.hostname}:${redisUrl.port}`)
      expect(claim?.attributes).toMatchObject({
        'db.system.name': 'redis',
        'db.operation.name': 'claim',
        'server.address': redisUrl.hostname,
        'server.port': Number(redisUrl.port),
        'db.namespace': '0',
      })
    })
  })

  describe('without a context manager or a parent span, on the memory store', () => {
    let app: FastifyInstance
    let store: IdempotencyStore

    beforeAll(async () => {
      store = memoryStore()
      app = Fastify()
      await app.register(fastifyIdempotency, {
        store,
        secrets: { current: 1, keys: { 1: SECRET } },
        principal: () => 'alice',
      })
      app.post('/orders', { config: { idempotency: true } }, async (_request, reply) => reply.code(201).send({}))
      await app.ready()
    })

    afterAll(async () => {
      await app.close()
      await store.close()
    })

    it('makes one trace per request, the request span its root', async () => {
      const key = randomUUID()
      for (let i = 0; i < 2; i++) {
        await app.inject({ method: 'POST', url: '/orders', headers: { 'idempotency-key': key }, payload: {} })
      }

      const { request, store: calls } = spansOf(exporter.getFinishedSpans())

      expect(request).toHaveLength(2)
      for (const requestSpan of request) {
        expect(requestSpan.parentSpanContext).toBeUndefined()
        const own = calls.filter((span) => span.parentSpanContext?.spanId === idOf(requestSpan))
        expect(own.length).toBeGreaterThanOrEqual(1)
        for (const span of own) expect(traceOf(span)).toBe(traceOf(requestSpan))
        // A memory store call is an in-process call: INTERNAL, named by its operation alone.
        for (const span of own)
          expect([span.kind, span.name]).toEqual([SpanKind.INTERNAL, span.attributes['db.operation.name']])
      }
      expect(new Set(request.map(traceOf)).size).toBe(2)
      expect(calls.every((span) => request.some((r) => idOf(r) === span.parentSpanContext?.spanId))).toBe(true)
    })
  })

  describe('on PostgreSQL', () => {
    let backing: TestStore
    let app: FastifyInstance
    let url: string

    beforeAll(async () => {
      backing = await createPostgresStore()
      ;({ app, url } = await tracedApp(backing.store))
    })

    afterAll(async () => {
      await app.close()
      await backing.teardown()
    })

    it('names the server, the database and the table on the store spans', async () => {
      const postgresUrl = new URL(inject('postgresUrl'))

      await post(url, randomUUID(), {})

      const claim = exporter.getFinishedSpans().find((span) => span.attributes['db.operation.name'] === 'claim')
      expect(claim?.name).toBe('claim public.idemkit_records')
      expect(claim?.attributes).toMatchObject({
        'db.system.name': 'postgresql',
        'server.address': postgresUrl.hostname,
        'server.port': Number(postgresUrl.port),
        'db.namespace': postgresUrl.pathname.slice(1),
        'db.collection.name': 'public.idemkit_records',
      })
    })
  })

  describe('the requests counter', () => {
    let reader: TestReader
    let meterProvider: MeterProvider
    let counting: Instrumentation
    let store: IdempotencyStore
    let app: FastifyInstance
    let url: string

    beforeEach(async () => {
      reader = new TestReader()
      meterProvider = new MeterProvider({ readers: [reader] })
      counting = instrumentIdempotency({ meterProvider, spans: false })
      store = memoryStore()
      ;({ app, url } = await tracedApp(store))
    })

    afterEach(async () => {
      counting.close()
      await app.close()
      await store.close()
      await meterProvider.shutdown()
    })

    it('tells a replayed 402 from a replayed 201, and carries the layer’s own statuses', async () => {
      const declined = randomUUID()
      const created = randomUUID()
      for (let i = 0; i < 2; i++) {
        expect((await post(url, declined, { status: 402 })).status).toBe(402)
        expect((await post(url, created, { status: 201 })).status).toBe(201)
      }
      expect((await post(url, created, { status: 201, other: true })).status).toBe(422)

      const { resourceMetrics } = await reader.collect()
      const points = resourceMetrics.scopeMetrics
        .flatMap((scope) => scope.metrics)
        .filter((metric) => metric.descriptor.name === 'idemkit.requests')
        .flatMap((metric) => metric.dataPoints as DataPoint<number>[])
      const counts = Object.fromEntries(
        points.map((point) => [
          `${point.attributes['idemkit.outcome']} ${point.attributes['http.response.status_code']}`,
          point.value,
        ]),
      )

      expect(counts).toEqual({
        'EXECUTED 402': 1,
        'EXECUTED 201': 1,
        'REPLAYED 402': 1,
        'REPLAYED 201': 1,
        'FINGERPRINT_MISMATCH 422': 1,
      })
    })
  })
})
