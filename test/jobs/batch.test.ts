/**
 * `idempotentBatch()` against a plain in-process batch source that behaves as SQS does: it
 * hands out batches, deletes what a batch acknowledged, and delivers the messages named in
 * `batchItemFailures` (and any duplicate it likes) again.
 */
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest'
import { IdempotencyInProgressError } from '../../src/core/errors.js'
import { type BatchResult, idempotentBatch } from '../../src/jobs/batch.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { type CountingStore, countingStore } from '../helpers/counting-store.js'
import { sleep } from '../helpers/sleep.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const SECRETS = { current: 1, keys: { 1: 'batch-test-secret-batch-test-secret' } }

/** An SQS-like record: the body as text, the id of this delivery's message. */
interface QueueRecord {
  readonly messageId: string
  readonly body: string
}

/** A queue in memory: messages stay until a batch acknowledges them. */
class BatchSource {
  readonly #pending: QueueRecord[] = []

  send(messageId: string, body: object): void {
    this.#pending.push({ messageId, body: JSON.stringify(body) })
  }

  /** The next batch: up to `max` of the messages not yet acknowledged, oldest first. */
  receive(max: number): QueueRecord[] {
    return this.#pending.slice(0, max)
  }

  /** Deletes the batch's messages but those in `batchItemFailures`, which are delivered again. */
  settle(batch: readonly QueueRecord[], result: BatchResult<QueueRecord, unknown>): void {
    const failed = new Set(result.batchItemFailures.map((failure) => failure.itemIdentifier))
    for (const record of batch) {
      if (failed.has(record.messageId)) continue
      const at = this.#pending.indexOf(record)
      if (at !== -1) this.#pending.splice(at, 1)
    }
  }

  get size(): number {
    return this.#pending.length
  }
}

describe.each(STORES)('idempotentBatch() on the %s store', (_name, create) => {
  let backing: TestStore
  let counted: CountingStore

  beforeEach(async () => {
    backing = await create()
    counted = countingStore(backing.store)
  })

  afterEach(async () => {
    await backing.teardown()
  })

  it('reports the failed messages in batchItemFailures; delivered again, only they run, and every message runs once', async () => {
    const source = new BatchSource()
    const runs = new Map<string, number>()
    const handle = idempotentBatch(
      async (record: QueueRecord) => {
        const { orderId } = JSON.parse(record.body) as { orderId: string }
        const run = (runs.get(orderId) ?? 0) + 1
        runs.set(orderId, run)
        if (orderId === 'o-2' && run === 1) throw Object.assign(new Error('inventory busy'), { retryable: true })
        return { orderId, run }
      },
      {
        store: counted.store,
        secrets: SECRETS,
        operation: 'place-order',
        key: (record) => (JSON.parse(record.body) as { orderId: string }).orderId,
        fingerprint: (record) => record.body,
      },
    )
    source.send('msg-1', { orderId: 'o-1' })
    source.send('msg-2', { orderId: 'o-2' })
    source.send('msg-3', { orderId: 'o-3' })

    const batch = source.receive(10)
    const first = await handle(batch)
    source.settle(batch, first)
    // The queue delivers o-1 once more too (at least once: a duplicate under another message id).
    source.send('msg-1-again', { orderId: 'o-1' })
    const retry = source.receive(10)
    const second = await handle(retry)
    source.settle(retry, second)

    expect(first.batchItemFailures).toEqual([{ itemIdentifier: 'msg-2' }])
    expect(first.results.map((result) => result.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
    expect(first.results[1]).toMatchObject({ reason: { message: 'inventory busy' } })
    expect(retry.map((record) => record.messageId)).toEqual(['msg-2', 'msg-1-again'])
    expect(second.batchItemFailures).toEqual([])
    expect(second.results).toMatchObject([
      { status: 'fulfilled', value: { orderId: 'o-2', run: 2 } },
      { status: 'fulfilled', value: { orderId: 'o-1', run: 1 } },
    ])
    expect(Object.fromEntries(runs)).toEqual({ 'o-1': 1, 'o-2': 2, 'o-3': 1 })
    expect(source.size).toBe(0)
  })

  it('costs one store round trip per message on a replay, and the claim and completion on a first run', async () => {
    const handle = idempotentBatch(async (message: { id: string }) => message.id, {
      store: counted.store,
      secrets: SECRETS,
      operation: 'count',
      key: 'id',
      concurrency: 5,
    })
    const batch = ['a', 'b', 'c', 'd', 'e'].map((id) => ({ id }))

    counted.reset()
    await handle(batch)
    const first = { ...counted.counts }
    counted.reset()
    const replayed = await handle(batch)

    expect(first).toEqual({ claim: 5, complete: 5 })
    expect({ ...counted.counts }).toEqual({ claim: 5 })
    expect(replayed.results.map((result) => result.status === 'fulfilled' && result.value)).toEqual([
      'a',
      'b',
      'c',
      'd',
      'e',
    ])
  })
})

describe('idempotentBatch()', () => {
  const store = memoryStore()

  afterAll(() => store.close())

  it('with stopOnFailure, reports the rest of the batch failed after the first failure, without running it', async () => {
    const ran: string[] = []
    const handle = idempotentBatch(
      async (message: { id: string }) => {
        ran.push(message.id)
        if (message.id === 'b') throw Object.assign(new Error('no'), { retryable: true })
        return message.id
      },
      { store, secrets: SECRETS, operation: 'fifo', key: 'id', stopOnFailure: true, concurrency: 4 },
    )

    const result = await handle([{ id: 'a' }, { id: 'b' }, { id: 'c' }, { id: 'd' }])

    expect(ran).toEqual(['a', 'b'])
    expect(result.results.map((item) => item.status)).toEqual(['fulfilled', 'rejected', 'skipped', 'skipped'])
    expect(result.batchItemFailures).toEqual([
      { itemIdentifier: 'b' },
      { itemIdentifier: 'c' },
      { itemIdentifier: 'd' },
    ])
  })

  it('handles up to concurrency messages at once, keeping the results in the batch order', async () => {
    let running = 0
    let most = 0
    const handle = (concurrency: number) =>
      idempotentBatch(
        async (message: { id: string }) => {
          running++
          most = Math.max(most, running)
          await sleep(30)
          running--
          return message.id
        },
        { store, secrets: SECRETS, operation: `lanes-${concurrency}`, key: 'id', concurrency },
      )
    const batch = Array.from({ length: 8 }, (_, i) => ({ id: `m-${i}` }))

    most = 0
    await handle(1)(batch)
    const inOrder = most
    most = 0
    const result = await handle(4)(batch)

    expect(inOrder).toBe(1)
    expect(most).toBe(4)
    expect(result.results.map((item) => item.itemIdentifier)).toEqual(batch.map((message) => message.id))
  })

  it('a duplicate within one batch: one runs, the other is reported failed as in progress, then replays', async () => {
    let runs = 0
    const handle = idempotentBatch(
      async (message: { messageId: string; orderId: string }) => {
        runs++
        await sleep(50)
        return message.orderId
      },
      { store, secrets: SECRETS, operation: 'dup', key: 'orderId', fingerprint: (m) => m.orderId, concurrency: 2 },
    )
    const batch = [
      { messageId: 'x-1', orderId: 'o-9' },
      { messageId: 'x-2', orderId: 'o-9' },
    ]

    const first = await handle(batch)
    const again = await handle([batch[1] as (typeof batch)[1]])

    expect(first.batchItemFailures).toEqual([{ itemIdentifier: 'x-2' }])
    expect(first.results[1]).toMatchObject({ status: 'rejected' })
    expect((first.results[1] as { reason: unknown }).reason).toBeInstanceOf(IdempotencyInProgressError)
    expect(again.results).toMatchObject([{ status: 'fulfilled', value: 'o-9' }])
    expect(runs).toBe(1)
  })

  it('a message whose key cannot be taken fails alone, named by its place in the batch', async () => {
    const handle = idempotentBatch(async (message: { id?: string }) => message.id, {
      store,
      secrets: SECRETS,
      operation: 'keys',
      key: 'id',
    })

    const result = await handle([{ id: 'k-1' }, {}])

    expect(result.batchItemFailures).toEqual([{ itemIdentifier: '1' }])
    expect(result.results[1]).toMatchObject({ status: 'rejected', reason: { code: 'ERR_IDEM_INVALID_ARGUMENT' } })
  })

  it.each([
    ['concurrency', { concurrency: 0 }],
    ['stopOnFailure', { stopOnFailure: 'yes' }],
    ['itemIdentifier', { itemIdentifier: 'messageId' }],
  ])('refuses a bad %s with ERR_IDEM_INVALID_OPTION', (name, override) => {
    expect(() =>
      idempotentBatch(async (message: { id: string }) => message.id, {
        store,
        secrets: SECRETS,
        operation: 'op',
        key: 'id',
        ...(override as object),
      }),
    ).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_OPTION', message: expect.stringContaining(`"${name}"`) }),
    )
  })
})
