/**
 * Issue 24, finding 1: `idemkit resolve` kept the holder's owner token and attempt, so a holder
 * that was slow rather than dead completed afterwards with ALREADY and answered its client its
 * own answer while every retry replayed the operator's: two answers for one key. A resolution
 * is fenced now: the record gets an owner of the operator's and `attempt + 1`, so the late
 * holder's renewal is refused (its signal aborts), its completion is refused (503, its
 * transaction rolled back), and the record keeps who resolved it, when and why. On every store,
 * with a live holder, whatever the order of its renewal and its completion.
 */
import { randomUUID } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import { inspectScope, resolveScope } from '../../src/admin/index.js'
import { parseSecrets } from '../../src/core/scope.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { isTransactional } from '../../src/core/store-transaction.js'
import { SECRET } from '../helpers/example-app.js'
import { sleep } from '../helpers/executor-harness.js'
import { pluginApp, postOrder } from '../helpers/plugin-app.js'
import { STORES, type TestStore, testPostgresPool } from '../helpers/stores.js'

const secrets = parseSecrets({ current: 1, keys: { 1: SECRET } })
const OPERATION = 'POST /orders'

/** A gate the test opens to let the slow holder answer. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open: () => void = () => undefined
  const wait = new Promise<void>((resolve) => {
    open = resolve
  })
  return { wait, open }
}

describe.each(STORES)('a resolution on the %s store fences the holder still running', (storeName, create) => {
  let backing: TestStore | undefined
  let app: FastifyInstance | undefined

  afterEach(async () => {
    await app?.close()
    await backing?.teardown()
    app = undefined
    backing = undefined
  })

  /** The app; its route runs in the store's transaction where the store has one, unless `plain`. */
  async function start(leaseMs: number, holder: { wait: Promise<void> }, plain = false) {
    backing = await create()
    const store = backing.store
    const transaction = isTransactional(store) && !plain
    const seen: { aborted: boolean; fencingToken: number }[] = []
    app = await pluginApp(store, { leaseMs, recordRetryMs: 0 })
    app.post(
      '/orders',
      { config: { idempotency: transaction ? { transaction: true } : true } },
      async (request, reply) => {
        const info = request.idempotency
        if (info?.db !== undefined) {
          await info.db.query('INSERT INTO issue24_orders (made_by) VALUES ($1)', [String(info.fencingToken)])
        }
        await holder.wait
        seen.push({ aborted: info?.signal.aborted === true, fencingToken: info?.fencingToken ?? 0 })
        return reply.code(201).send({ order: 'handler-made' })
      },
    )
    if (transaction) {
      const pool = testPostgresPool()
      await pool.query('CREATE TABLE IF NOT EXISTS issue24_orders (made_by text NOT NULL)')
      await pool.query('TRUNCATE issue24_orders')
      await pool.end()
    }
    return { store, seen, transaction }
  }

  const post = (key: string) => postOrder(app as FastifyInstance, key)

  async function rowsMade(): Promise<number> {
    const pool = testPostgresPool()
    try {
      return (await pool.query('SELECT count(*)::int AS n FROM issue24_orders')).rows[0].n
    } finally {
      await pool.end()
    }
  }

  for (const order of ['completes before its next renewal', 'renews (refused) before it completes'] as const) {
    it(`the holder ${order}: one answer for the key, the operator's`, async () => {
      const holder = gate()
      // A long lease: no renewal falls between the resolution and the completion. A short one:
      // renewals every 150 ms, so the refused renewal comes first.
      const leaseMs = order === 'completes before its next renewal' ? 30_000 : 450
      const { store, seen, transaction } = await start(leaseMs, holder)
      const key = randomUUID()
      const first = post(key)
      // The holder is running (EXECUTING, its lease live) when the operator steps in.
      const scope = { store, secrets, principal: 'alice', key, operation: OPERATION }
      for (let i = 0; i < 200; i++) {
        const found = await inspectScope(scope)
        if (found.versions[0]?.record?.state === 'EXECUTING') break
        await sleep(10)
      }
      await expect(
        resolveScope({
          ...scope,
          resolution: { as: 'completed', status: 201, body: Buffer.from('{"order":"operator-made"}') },
          force: true,
        }),
      ).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_OPTION' })
      const audit = await resolveScope({
        ...scope,
        resolution: { as: 'completed', status: 201, body: Buffer.from('{"order":"operator-made"}') },
        force: true,
        actor: 'oncall',
        reason: 'the payment provider confirmed the charge',
      })
      expect(audit).toMatchObject({ from: 'EXECUTING', to: 'COMPLETED', attempt: 1, newAttempt: 2, forced: true })
      if (order === 'renews (refused) before it completes') await sleep(600)
      holder.open()
      const answered = await first
      // The holder's own answer is not given: it could not be recorded, the key has another.
      expect(answered.statusCode).toBe(503)
      expect(answered.body).not.toContain('handler-made')
      expect(seen).toEqual([{ aborted: order === 'renews (refused) before it completes', fencingToken: 1 }])
      if (transaction) expect(await rowsMade()).toBe(0)
      for (let i = 0; i < 3; i++) {
        const retry = await post(key)
        expect(retry.statusCode).toBe(201)
        expect(retry.json()).toEqual({ order: 'operator-made' })
        expect(retry.headers['idempotent-replayed']).toBe('true')
      }
      // The record says who resolved it, when and why.
      const record = (await inspectScope(scope)).versions[0]?.record
      expect(record).toMatchObject({ state: 'COMPLETED', attempt: 2, operation: OPERATION })
      expect(record?.resolution).toMatchObject({
        by: 'oncall',
        reason: 'the payment provider confirmed the charge',
        from: 'EXECUTING',
        forced: true,
        fencedAttempt: 1,
      })
      console.log(
        `[issue-24 resolve ${storeName}] holder ${order}: holder answered ${answered.statusCode}, retries 3 × 201 operator-made`,
      )
    })
  }

  /** `store`, with `before()` run ahead of every `replace()`: the resolution's write, held back. */
  function replaceAfter(store: IdempotencyStore, before: () => Promise<void>): IdempotencyStore {
    return new Proxy(store, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver)
        if (name === 'replace') {
          return async (...args: Parameters<NonNullable<IdempotencyStore['replace']>>) => {
            await before()
            return target.replace?.(...args)
          }
        }
        // The store's own methods, on the store itself (they use its private fields).
        return typeof value === 'function' ? value.bind(target) : value
      },
    })
  }

  /** Waits until the scope's record is EXECUTING (the holder runs its handler). */
  async function untilExecuting(scope: Parameters<typeof inspectScope>[0]): Promise<void> {
    for (let i = 0; i < 300; i++) {
      if ((await inspectScope(scope)).versions[0]?.record?.state === 'EXECUTING') return
      await sleep(10)
    }
    throw new Error('the holder never ran')
  }

  const operatorMade = { as: 'completed', status: 201, body: Buffer.from('{"order":"operator-made"}') } as const

  it("the holder completes between the resolution's read and its write: the resolution is refused, the holder's answer stands", async () => {
    const holder = gate()
    const { store, transaction } = await start(30_000, holder)
    const key = randomUUID()
    const first = post(key)
    const scope = { store, secrets, principal: 'alice', key, operation: OPERATION }
    await untilExecuting(scope)
    let answered: Awaited<ReturnType<typeof post>> | undefined
    // The resolution has read the record EXECUTING; the holder completes before its write lands.
    const late = replaceAfter(store, async () => {
      holder.open()
      answered = await first
    })
    await expect(
      resolveScope({ ...scope, store: late, resolution: operatorMade, force: true, reason: 'provider confirmed' }),
    ).rejects.toMatchObject({ code: 'ERR_IDEM_RESOLVE_REFUSED', message: expect.stringContaining('changed since') })
    expect(answered?.statusCode).toBe(201)
    expect(answered?.json()).toEqual({ order: 'handler-made' })
    if (transaction) expect(await rowsMade()).toBe(1)
    for (let i = 0; i < 2; i++) {
      const retry = await post(key)
      expect(retry.statusCode).toBe(201)
      expect(retry.json()).toEqual({ order: 'handler-made' })
      expect(retry.headers['idempotent-replayed']).toBe('true')
    }
    const record = (await inspectScope(scope)).versions[0]?.record
    expect(record).toMatchObject({ state: 'COMPLETED', attempt: 1 })
    expect(record?.resolution).toBeUndefined()
  })

  it('whatever the order of the resolution and the completion (12 trials, the holder let go 0-30 ms apart from the write): one answer', async () => {
    const tally: Record<string, number> = {}
    for (let trial = 0; trial < 12; trial++) {
      const holder = gate()
      // On PostgreSQL, every other trial's route runs outside a transaction (its completion is
      // the store's own call, as on the other stores).
      const { store, transaction } = await start(30_000, holder, trial % 2 === 1)
      const key = randomUUID()
      const first = post(key)
      const scope = { store, secrets, principal: 'alice', key, operation: OPERATION }
      await untilExecuting(scope)
      // The resolution has read the record EXECUTING (the operator resolves a running holder);
      // the holder is let go up to 30 ms before or after its write is sent, so the holder's
      // completion and the resolution's compare-and-set race, in either order.
      const holderDelay = (trial * 7) % 31
      const writeDelay = (trial * 11) % 31
      const racing = replaceAfter(store, async () => {
        setTimeout(() => holder.open(), holderDelay)
        await sleep(writeDelay)
      })
      const resolved = await resolveScope({
        ...scope,
        store: racing,
        resolution: operatorMade,
        force: true,
        reason: 'provider confirmed',
      }).then(
        () => 'resolved',
        (error: { code?: string }) => String(error.code),
      )
      const answered = await first
      const retries = [await post(key), await post(key)]
      // Every 2xx the key ever gave, the holder's and the retries': one body.
      const bodies = new Set([answered, ...retries].filter((r) => r.statusCode === 201).map((r) => r.body))
      expect(bodies.size, `trial ${trial}: ${resolved}, holder ${answered.statusCode}`).toBe(1)
      expect(retries.every((r) => r.statusCode === 201)).toBe(true)
      if (resolved === 'resolved') {
        expect(answered.statusCode).toBe(503)
        expect([...bodies][0]).toContain('operator-made')
        if (transaction) expect(await rowsMade()).toBe(0)
      } else {
        expect(resolved).toBe('ERR_IDEM_RESOLVE_REFUSED')
        expect(answered.statusCode).toBe(201)
        expect([...bodies][0]).toContain('handler-made')
        if (transaction) expect(await rowsMade()).toBe(1)
      }
      const outcome = resolved === 'resolved' ? 'resolution first' : 'completion first'
      tally[outcome] = (tally[outcome] ?? 0) + 1
      await app?.close()
      await backing?.teardown()
      app = undefined
      backing = undefined
    }
    console.log(`[issue-24 resolve ${storeName}] 12 interleavings: ${JSON.stringify(tally)}`)
  }, 120_000)

  it('a record resolved retryable under a live holder: the holder answers 503, the next retry runs once', async () => {
    const holder = gate()
    const { store, transaction } = await start(30_000, holder)
    const key = randomUUID()
    const first = post(key)
    const scope = { store, secrets, principal: 'alice', key, operation: OPERATION }
    for (let i = 0; i < 200; i++) {
      if ((await inspectScope(scope)).versions[0]?.record?.state === 'EXECUTING') break
      await sleep(10)
    }
    await resolveScope({ ...scope, resolution: { as: 'retryable' }, force: true, reason: 'rerun it' })
    holder.open()
    expect((await first).statusCode).toBe(503)
    if (transaction) expect(await rowsMade()).toBe(0)
    const retry = await post(key)
    expect(retry.statusCode).toBe(201)
    expect(retry.json()).toEqual({ order: 'handler-made' })
    if (transaction) expect(await rowsMade()).toBe(1)
    expect((await post(key)).headers['idempotent-replayed']).toBe('true')
  })
})
