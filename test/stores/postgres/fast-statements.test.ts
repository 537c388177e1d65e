/**
 * The PostgreSQL store's fast statements (src/stores/postgres/statements.ts `fastStatements`) on
 * the suite's cluster: which statements each call sends (the pool's connections observed, the
 * statements themselves real), that the answers on the fast path are the functions', that every
 * other case goes to the function, and that a fast statement changes no setting of the
 * application's connections.
 */
import type pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { ClaimReply, TransitionReply } from '../../../src/core/record.js'
import type { ClaimRequest } from '../../../src/core/store.js'
import { type PostgresStore, postgresStore } from '../../../src/stores/postgres/index.js'
import { claimRequest, testPostgresPool } from '../../helpers/stores.js'

/**
 * A pool whose checked-out connections note the name of every named statement they send
 * (`pool.connect()` as the store calls it; the tests' own reads go through `read`).
 */
function observedPool(max: number): { pool: pg.Pool; sent: string[] } {
  const pool = testPostgresPool({ max })
  const sent: string[] = []
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>
  ;(pool as unknown as { connect: () => Promise<pg.PoolClient> }).connect = async () => {
    const client = await connect()
    const marked = client as pg.PoolClient & { observed?: true }
    if (marked.observed === undefined) {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown
      ;(client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        const name = (args[0] as { name?: unknown } | undefined)?.name
        if (typeof name === 'string') sent.push(name.replace(/_[0-9a-f]{12}$/, ''))
        return query(...args)
      }
      marked.observed = true
    }
    return client
  }
  return { pool, sent }
}

/** `text` on a connection of `pool`'s own, its rows. */
async function read(pool: pg.Pool, text: string, values: unknown[] = []): Promise<Record<string, unknown>[]> {
  const client = await pool.connect()
  try {
    return (await client.query(text, values)).rows
  } finally {
    client.release()
  }
}

describe('the PostgreSQL store: fast statements', () => {
  let pool: pg.Pool
  let sent: string[]
  let store: PostgresStore

  beforeEach(async () => {
    ;({ pool, sent } = observedPool(1))
    store = postgresStore({ pool, keyPrefix: 'test', sweepIntervalMs: 0 })
    await store.migrate()
    sent.length = 0
  })

  afterEach(async () => {
    await store.close()
    await pool.end()
  })

  /** A first execution of `base`: its claim and its completion. */
  async function firstExecution(base: ClaimRequest, response = 'ok') {
    const claimed = await store.claim(base)
    if (claimed.kind !== ClaimReply.ACQUIRED) throw new Error(claimed.kind)
    const done = await store.complete({ ...base, attempt: 1, rev: claimed.rev }, Buffer.from(response), base)
    return { claimed, done }
  }

  it('a first execution and a replay send one plain statement per call, no function', async () => {
    const base = claimRequest(store)
    const { claimed, done } = await firstExecution(base, 'the answer')
    expect(claimed).toMatchObject({ kind: ClaimReply.ACQUIRED, state: 'EXECUTING', attempt: 1, rev: 1 })
    expect(done).toEqual({ kind: TransitionReply.OK, rev: 2 })
    const replay = await store.claim({ ...base, owner: claimRequest(store).owner })
    expect(replay).toMatchObject({ kind: ClaimReply.COMPLETED_REPLAY, codec: 'c', policy: 'p' })
    expect(Buffer.from((replay as { response: Uint8Array }).response).toString()).toBe('the answer')
    expect(sent).toEqual(['idemkit_fast_claim', 'idemkit_fast_complete', 'idemkit_fast_claim'])
  })

  it("answers as the functions do: the new key's lease and the replay window from the database's clock", async () => {
    const before = Date.now()
    const base = claimRequest(store, { leaseMs: 7_000, replayWindowMs: 50_000 })
    const { claimed } = await firstExecution(base)
    const after = Date.now()
    const { leaseUntil } = claimed as { leaseUntil: number }
    // The suite's cluster runs on this machine's clock.
    expect(leaseUntil).toBeGreaterThanOrEqual(before + 7_000 - 5)
    expect(leaseUntil).toBeLessThanOrEqual(after + 7_000 + 5)
    const rows = await read(
      pool,
      `SELECT state, attempt, rev, (extract(epoch FROM replay_until) * 1000)::bigint AS replay,
        (extract(epoch FROM expires_at) * 1000)::bigint AS expires, created_at <= updated_at AS ordered
       FROM idemkit_records WHERE key = $1`,
      [base.key],
    )
    expect(rows[0]).toMatchObject({ state: 'COMPLETED', attempt: '1', rev: '2', ordered: true })
    expect(rows[0]?.replay).toBe(rows[0]?.expires)
    const replay = await store.claim(base)
    expect(replay).toMatchObject({ kind: ClaimReply.COMPLETED_REPLAY, replayUntil: Number(rows[0]?.replay) })
  })

  it('answers a mismatch, and a replay for a legacy fingerprint, from the fast claim alone', async () => {
    const base = claimRequest(store)
    await firstExecution(base)
    sent.length = 0
    expect(await store.claim({ ...base, fingerprint: 'other' })).toEqual({ kind: ClaimReply.FINGERPRINT_MISMATCH })
    const legacy = await store.claim({ ...base, fingerprint: 'new', legacyFingerprints: ['f'] })
    expect(legacy.kind).toBe(ClaimReply.COMPLETED_REPLAY)
    // A running record with another fingerprint is a mismatch as well (step 2 comes first).
    const running = claimRequest(store)
    await store.claim(running)
    expect(await store.claim({ ...running, fingerprint: 'other' })).toEqual({ kind: ClaimReply.FINGERPRINT_MISMATCH })
    expect(sent).toEqual(['idemkit_fast_claim', 'idemkit_fast_claim', 'idemkit_fast_claim', 'idemkit_fast_claim'])
  })

  it('leaves to the function what it cannot be certain of: a request in flight, an expired row, a refused completion', async () => {
    const running = claimRequest(store)
    const held = await store.claim(running)
    if (held.kind !== ClaimReply.ACQUIRED) throw new Error(held.kind)
    sent.length = 0
    expect(await store.claim({ ...running, owner: claimRequest(store).owner })).toMatchObject({
      kind: ClaimReply.IN_PROGRESS,
    })
    expect(sent).toEqual(['idemkit_fast_claim', 'idemkit_claim'])

    // The caller's own claim again (its reply lost): step 5, the function's.
    sent.length = 0
    expect(await store.claim(running)).toMatchObject({ kind: ClaimReply.REPLAYED_ACQUIRE, attempt: 1, rev: 1 })
    expect(sent).toEqual(['idemkit_fast_claim', 'idemkit_claim'])

    // A completion with a rev that is not the row's: the function names the refusal.
    sent.length = 0
    const ref = { key: running.key, owner: running.owner, attempt: 1, rev: held.rev }
    expect(await store.complete({ ...ref, rev: 7 }, Buffer.from('x'), running)).toEqual({
      kind: TransitionReply.WRONG_STATE,
      state: 'EXECUTING',
    })
    expect(await store.complete({ ...ref, owner: claimRequest(store).owner }, Buffer.from('x'), running)).toEqual({
      kind: TransitionReply.NOT_OWNER,
    })
    expect(sent).toEqual(['idemkit_fast_complete', 'idemkit_complete', 'idemkit_fast_complete', 'idemkit_complete'])
    // Completed, then completed again (a re-sent completion whose reply was lost): ALREADY.
    expect(await store.complete(ref, Buffer.from('x'), running)).toEqual({ kind: TransitionReply.OK, rev: 2 })
    expect(await store.complete(ref, Buffer.from('x'), running)).toEqual({ kind: TransitionReply.ALREADY, rev: 2 })

    // A completed row whose window ran out (left for the sweeper): the function creates it afresh.
    const old = claimRequest(store, { replayWindowMs: 1 })
    await firstExecution(old)
    await new Promise((resolve) => setTimeout(resolve, 20))
    sent.length = 0
    expect(await store.claim(old)).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1, rev: 1 })
    expect(sent).toEqual(['idemkit_fast_claim', 'idemkit_claim'])
  })

  it("sets nothing on the application's connections: lock_timeout is the statement's own", async () => {
    const base = claimRequest(store)
    await firstExecution(base)
    await store.claim(base)
    // The pool has one connection: the one every call above used.
    const rows = await read(pool, 'SHOW lock_timeout')
    expect(rows[0]?.lock_timeout).toBe('0')
  })

  it('goes to the function when the row is locked: the fast statement ends after 1 ms, nothing written, and the function waits', async () => {
    const { pool: wide, sent: wideSent } = observedPool(4)
    const other = postgresStore({ pool: wide, keyPrefix: 'test', sweepIntervalMs: 0, lockTimeoutMs: 3_000 })
    try {
      const base = claimRequest(other)
      const held = await other.claim(base)
      if (held.kind !== ClaimReply.ACQUIRED) throw new Error(held.kind)
      const holder = await wide.connect()
      try {
        await holder.query('BEGIN')
        await holder.query('SELECT 1 FROM idemkit_records WHERE key = $1 FOR UPDATE', [base.key])
        const completing = other.complete({ ...base, attempt: 1, rev: held.rev }, Buffer.from('after'), base)
        await new Promise((resolve) => setTimeout(resolve, 200))
        await holder.query('COMMIT')
        expect(await completing).toEqual({ kind: TransitionReply.OK, rev: 2 })
      } finally {
        holder.release()
      }
      // The schema version read once (this store did not migrate), then the calls.
      expect(wideSent).toEqual([
        'idemkit_schema_version',
        'idemkit_fast_claim',
        'idemkit_fast_complete',
        'idemkit_complete',
      ])
      const rows = await read(wide, 'SELECT state, resp FROM idemkit_records WHERE key = $1', [base.key])
      expect(rows[0]).toEqual({ state: 'COMPLETED', resp: Buffer.from('after') })
    } finally {
      await other.close()
      await wide.end()
    }
  })
})
