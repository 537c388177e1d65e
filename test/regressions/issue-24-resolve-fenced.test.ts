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
import { isTransactional } from '../../src/core/store.js'
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

  async function start(leaseMs: number, holder: { wait: Promise<void> }) {
    backing = await create()
    const store = backing.store
    const transaction = isTransactional(store)
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
