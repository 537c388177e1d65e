/**
 * `idemkit/otel`'s histograms on a default `MeterProvider` (no views): they record seconds, so
 * each carries bucket advice (the HTTP and database semantic conventions' boundaries, with
 * sub-millisecond ones for the layer's own time and the store calls). Without it the SDK's
 * default boundaries (0, 5, 10, ...: meant for milliseconds) put every observation under 5 s
 * in one bucket, and a p99 read from them is ~4.95 s for a layer that adds a millisecond.
 */
import { randomUUID } from 'node:crypto'
import { channel } from 'node:diagnostics_channel'
import { type DataPoint, type Histogram, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics'
import Fastify, { type FastifyInstance } from 'fastify'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { OUTCOME_CHANNEL } from '../../src/core/channels.js'
import type { OutcomeEvent } from '../../src/core/outcomes.js'
import { type Instrumentation, instrumentIdempotency } from '../../src/otel/index.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { SECRET } from '../helpers/example-app.js'
import { sleep } from '../helpers/sleep.js'

class TestReader extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

const HTTP = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]
const OVERHEAD = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, ...HTTP]
const STORE = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10]

/** The one histogram point of `name` (all attribute sets merged), or undefined. */
async function histogram(reader: TestReader, name: string): Promise<Histogram | undefined> {
  const { resourceMetrics } = await reader.collect()
  let merged: Histogram | undefined
  for (const scope of resourceMetrics.scopeMetrics) {
    for (const metric of scope.metrics) {
      if (metric.descriptor.name !== name) continue
      for (const point of metric.dataPoints as DataPoint<Histogram>[]) {
        const value = point.value
        if (merged === undefined) {
          merged = structuredClone(value)
        } else {
          merged.count += value.count
          merged.min = Math.min(merged.min ?? Number.POSITIVE_INFINITY, value.min ?? Number.POSITIVE_INFINITY)
          merged.max = Math.max(merged.max ?? Number.NEGATIVE_INFINITY, value.max ?? Number.NEGATIVE_INFINITY)
          merged.buckets.counts = merged.buckets.counts.map((count, i) => count + (value.buckets.counts[i] ?? 0))
        }
      }
    }
  }
  return merged
}

/** The index of the bucket an observation of `seconds` falls in: the first boundary at or above it. */
function bucketOf(boundaries: readonly number[], seconds: number): number {
  const index = boundaries.findIndex((boundary) => seconds <= boundary)
  return index === -1 ? boundaries.length : index
}

describe('idemkit/otel histogram buckets on a default MeterProvider', () => {
  let reader: TestReader
  let meterProvider: MeterProvider
  let instrumentation: Instrumentation

  beforeEach(() => {
    reader = new TestReader()
    meterProvider = new MeterProvider({ readers: [reader] })
    instrumentation = instrumentIdempotency({ meterProvider, spans: false })
  })

  afterEach(async () => {
    instrumentation.close()
    await meterProvider.shutdown()
  })

  /** An outcome as the executor publishes it, with chosen timings. */
  function outcome(durationMs: number, executionMs: number | undefined): void {
    const event: OutcomeEvent = {
      type: 'outcome',
      outcome: executionMs === undefined ? 'REPLAYED' : 'EXECUTED',
      attempt: undefined,
      reason: undefined,
      classification: undefined,
      durationMs,
      storeMs: durationMs - (executionMs ?? 0),
      executionMs,
      operation: 'POST /orders',
      digest: 'aaaaaaaaaaaa',
    }
    channel(OUTCOME_CHANNEL).publish(event)
  }

  it('puts three 30 ms handlers in the 25-50 ms bucket and a 0.4 ms overhead under 0.5 ms', async () => {
    for (let i = 0; i < 3; i++) outcome(30.4, 30)

    const execution = await histogram(reader, 'idemkit.execution.duration')
    const overhead = await histogram(reader, 'idemkit.request.overhead')

    expect(execution?.buckets.boundaries).toEqual(HTTP)
    const executionCounts = Array(HTTP.length + 1).fill(0)
    executionCounts[bucketOf(HTTP, 0.03)] = 3
    expect(execution?.buckets.counts).toEqual(executionCounts)
    expect(bucketOf(HTTP, 0.03)).toBe(3) // (0.025, 0.05]
    expect(overhead?.buckets.boundaries).toEqual(OVERHEAD)
    const overheadCounts = Array(OVERHEAD.length + 1).fill(0)
    overheadCounts[2] = 3 // (0.00025, 0.0005]
    expect(overhead?.buckets.counts).toEqual(overheadCounts)
  })

  it('counts an observation equal to a boundary in the bucket that ends there', async () => {
    outcome(5, 5)
    outcome(10.001, 10.001)

    const execution = await histogram(reader, 'idemkit.execution.duration')

    // 0.005 s is in (0, 0.005]; 0.010001 s in (0.01, 0.025].
    expect(execution?.buckets.counts[0]).toBe(1)
    expect(execution?.buckets.counts[2]).toBe(1)
    expect(execution?.count).toBe(2)
  })

  describe('through the Fastify plugin on the memory store', () => {
    let app: FastifyInstance

    beforeEach(async () => {
      app = Fastify()
      await app.register(fastifyIdempotency, {
        store: memoryStore(),
        secrets: { current: 1, keys: { 1: SECRET } },
        principal: () => 'alice',
      })
      app.post('/orders', { config: { idempotency: true } }, async (_request, reply) => {
        await sleep(30)
        return reply.code(201).send({ ok: true })
      })
      await app.ready()
    })

    afterEach(async () => {
      await app.close()
    })

    it('records three 30 ms requests above the first buckets, and each store call in its own bucket', async () => {
      for (let i = 0; i < 3; i++) {
        const response = await app.inject({
          method: 'POST',
          url: '/orders',
          headers: { 'idempotency-key': randomUUID() },
          payload: { n: i },
        })
        expect(response.statusCode).toBe(201)
      }

      const execution = await histogram(reader, 'idemkit.execution.duration')
      const store = await histogram(reader, 'idemkit.store.operation.duration')

      // A 30 ms sleep takes at least 30 ms: nothing at or under 25 ms, whatever the machine's load.
      expect(execution?.count).toBe(3)
      expect(execution?.buckets.counts.slice(0, 3)).toEqual([0, 0, 0])
      expect(execution?.buckets.counts.reduce((sum, count) => sum + count, 0)).toBe(3)
      // Each store call falls in the bucket of its own duration: the min's bucket and the max's
      // bound every non-empty one.
      expect(store?.buckets.boundaries).toEqual(STORE)
      const counts = store?.buckets.counts ?? []
      const first = bucketOf(STORE, store?.min ?? 0)
      const last = bucketOf(STORE, store?.max ?? 0)
      expect(counts[first]).toBeGreaterThan(0)
      expect(counts[last]).toBeGreaterThan(0)
      counts.forEach((count, i) => {
        if (i < first || i > last) expect(count).toBe(0)
      })
    })
  })
})
