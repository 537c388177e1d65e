/**
 * The store front (src/core/store-front.ts): a store of one's own that checks nothing is called
 * through it, so its malformed calls are refused exactly as the built-in stores refuse them,
 * before the store is reached; the built-in stores are fronts themselves.
 */
import { describe, expect, it } from 'vitest'
import { newOwnerToken } from '../../src/core/attempt.js'
import type { ClaimRequest, IdempotencyStore, OwnerRef, RecordTimes } from '../../src/core/store.js'
import { storeFront } from '../../src/core/store-front.js'
import type { StoreTransaction, TransactionalStore } from '../../src/core/store-transaction.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { claimRequest, describeStoreContract } from '../../src/testing/index.js'

const TIMES: RecordTimes = { leaseMs: 30_000, replayWindowMs: 60_000, failureRetentionMs: 60_000 }

/**
 * A store of one's own that checks no argument: every call is handed to a memory store's I/O as
 * it comes (the memory store's own front is passed by), and counted.
 */
function uncheckedStore(): { store: IdempotencyStore; calls: string[] } {
  const inner = memoryStore({ keyPrefix: 'own' })
  // The I/O behind the memory store's front: what a store of one's own implements.
  const io = inner as unknown as Record<string, (...args: unknown[]) => Promise<never>>
  const calls: string[] = []
  const pass =
    (name: string, method: string) =>
    (...args: unknown[]) => {
      calls.push(name)
      return io[method]?.call(inner, ...args) as Promise<never>
    }
  const store: IdempotencyStore = {
    name: 'own',
    keyPrefix: 'own',
    claim: pass('claim', 'doClaim'),
    start: pass('start', 'doStart'),
    complete: pass('complete', 'doComplete'),
    markFailed: pass('markFailed', 'doMarkFailed'),
    release: pass('release', 'doRelease'),
    renew: pass('renew', 'doRenew'),
    inspect: pass('inspect', 'doInspect'),
    read: (key) => inner.read(key),
    close: () => inner.close(),
  }
  return { store, calls }
}

// The whole contract, arguments included, on a store that checks nothing itself.
describeStoreContract(() => uncheckedStore().store, { name: 'a store of its own behind the front' })

describe('store front', () => {
  const key = `own:idem:1:d1:op1:${'a'.repeat(64)}`
  const ref: OwnerRef = { key, owner: newOwnerToken(), attempt: 1, rev: 1 }

  /** What a call rejects with: the error's class, code and message. */
  async function refusal(call: Promise<unknown>): Promise<unknown> {
    const error = await call.then(
      () => undefined,
      (caught: unknown) => caught,
    )
    if (!(error instanceof Error)) return error
    return { class: error.constructor.name, code: (error as { code?: string }).code, message: error.message }
  }

  const malformed: [string, (store: IdempotencyStore) => Promise<unknown>][] = [
    ['a claim with a short owner', (s) => s.claim(claimRequest(key, TIMES, { owner: 'x' }))],
    ['a claim with a zero lease', (s) => s.claim(claimRequest(key, TIMES, { leaseMs: 0 }))],
    [
      'a claim with an unknown expiredExecution',
      (s) => s.claim(claimRequest(key, TIMES, { expiredExecution: 'x' as never })),
    ],
    ['a claim that is no object', (s) => s.claim(null as unknown as ClaimRequest)],
    ['a start at attempt 0', (s) => s.start({ ...ref, attempt: 0 }, TIMES)],
    ['a complete with a string response', (s) => s.complete(ref, 'x' as never, TIMES)],
    ['a complete with no replay window', (s) => s.complete(ref, Buffer.from('x'), { ...TIMES, replayWindowMs: 0 })],
    ['a markFailed of an unknown kind', (s) => s.markFailed(ref, 'later' as never, TIMES)],
    ['a release at rev 0', (s) => s.release({ ...ref, rev: 0 })],
    ['a renew with a negative lease', (s) => s.renew(ref, { ...TIMES, leaseMs: -1 })],
    ['an inspect of an empty key', (s) => s.inspect('', ref.owner)],
    ['a read of an empty key', (s) => (s.read as NonNullable<IdempotencyStore['read']>)('')],
  ]

  it.each(malformed)('refuses %s as the memory store does, without reaching the store', async (_name, call) => {
    const { store, calls } = uncheckedStore()
    const builtIn = memoryStore()

    const front = await refusal(call(storeFront(store)))

    expect(front).toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
    expect(front).toEqual(await refusal(call(builtIn)))
    expect(calls).toEqual([])
    await builtIn.close()
  })

  it('hands a well-formed call on to the store unchanged', async () => {
    const { store, calls } = uncheckedStore()
    const front = storeFront(store)

    const claimed = await front.claim(claimRequest(key, TIMES))

    expect(claimed).toMatchObject({ kind: 'ACQUIRED', attempt: 1, rev: 1 })
    expect(calls).toEqual(['claim'])
  })

  it('leaves a built-in store as it is, and has the optional methods the store has', () => {
    const builtIn = memoryStore()
    const { store } = uncheckedStore()
    const front = storeFront(store)

    expect(storeFront(builtIn)).toBe(builtIn)
    expect(storeFront(front)).toBe(front)
    expect(typeof front.read).toBe('function')
    expect(front.replace).toBeUndefined()
    expect(front.watch).toBeUndefined()
    expect('beginTransaction' in front && typeof front.beginTransaction === 'function').toBe(false)
    expect(front.name).toBe('own')
    expect(front.keyPrefix).toBe('own')
  })

  it("rolls another store's transaction back when its commit is malformed", async () => {
    const { store } = uncheckedStore()
    const ended: string[] = []
    const transaction: StoreTransaction = {
      db: { query: async () => ({ rows: [], rowCount: 0 }) },
      commit: async () => {
        ended.push('commit')
        return { kind: 'OK', rev: 2 }
      },
      rollback: async () => {
        ended.push('rollback')
      },
    }
    const transactional: TransactionalStore = { ...store, beginTransaction: async () => transaction }
    const front = storeFront(transactional) as TransactionalStore

    const opened = await front.beginTransaction(ref, TIMES)
    const error = await refusal(opened.commit({ ...ref, rev: 0 }, Buffer.from('x'), TIMES))

    expect(error).toMatchObject({ code: 'ERR_IDEM_INVALID_ARGUMENT' })
    expect(ended).toEqual(['rollback'])
    expect(await opened.commit(ref, Buffer.from('x'), TIMES)).toEqual({ kind: 'OK', rev: 2 })
    expect(opened.db).toBe(transaction.db)
  })
})
