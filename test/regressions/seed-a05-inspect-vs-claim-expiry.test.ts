/**
 * The seed system's defect a05-f020 ("inspect vs claim expiry"), on the store it was found in:
 * its PostgreSQL claim locked the row and read the database clock, so a COMPLETED row past its
 * replay window was taken over; its inspect read no clock at all and kept replaying the old
 * response, so after the window the two answered differently for one row. Here both read
 * `clock_timestamp()` after reading the row and share one liveness rule (`<table>_live`): while
 * the expired row is still in the table, unswept, inspect answers ABSENT exactly when claim
 * acquires afresh.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest'
import { ClaimReply, InspectReply } from '../../src/core/record.js'
import { sleep } from '../helpers/executor-harness.js'
import { claimRequest, createPostgresStore, type TestStore } from '../helpers/stores.js'

const token = () => randomBytes(32).toString('hex')

describe('seed defect a05-f020: inspect and claim disagreed after the replay window, on PostgreSQL', () => {
  let backing: TestStore
  let admin: pg.Client

  beforeEach(async () => {
    backing = await createPostgresStore()
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
  })

  afterEach(async () => {
    await admin.end()
    await backing.teardown()
  })

  it('answers one way from both paths, before and after the window, while the expired row is still stored', async () => {
    const { store } = backing
    const times = { leaseMs: 5_000, replayWindowMs: 300, failureRetentionMs: 5_000 }
    const base = claimRequest(store, times)
    const first = await store.claim(base)
    if (first.kind !== ClaimReply.ACQUIRED) throw new Error(first.kind)
    await store.complete({ key: base.key, owner: base.owner, attempt: 1, rev: first.rev }, Buffer.from('old'), times)

    const inspectedBefore = await store.inspect(base.key, token())
    const claimedBefore = await store.claim({ ...base, owner: token() })
    await sleep(400)
    const stored = await admin.query('SELECT state, resp FROM idemkit_records WHERE key = $1', [base.key])
    const inspectedAfter = await store.inspect(base.key, token())
    const claimedAfter = await store.claim({ ...base, owner: token() })

    expect(inspectedBefore).toMatchObject({ kind: InspectReply.COMPLETED, response: Buffer.from('old') })
    expect(claimedBefore).toMatchObject({ kind: ClaimReply.COMPLETED_REPLAY, response: Buffer.from('old') })
    // The seed's inspect answered COMPLETED with the old response here.
    expect(stored.rows).toEqual([{ state: 'COMPLETED', resp: Buffer.from('old') }])
    expect(inspectedAfter).toEqual({ kind: InspectReply.ABSENT })
    expect(claimedAfter).toMatchObject({ kind: ClaimReply.ACQUIRED, attempt: 1 })
  })
})
