/**
 * `listRecords()` / `recordStats()` on every store, and `idemkit list` / `idemkit stats` as a
 * child process on Redis and PostgreSQL: 1,000 records made through the store's own calls, in
 * five states over two operations, counted back exactly.
 */
import { randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { listRecords, recordStats } from '../../src/admin/index.js'
import { ClaimReply, FailureKind } from '../../src/core/record.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { operationCode, storeKey } from '../../src/core/store-key.js'
import { cli } from '../helpers/cli.js'
import { claimRequest, STORES, type TestStore } from '../helpers/stores.js'

const PLAN = { EXECUTING: 400, CLAIMED: 150, COMPLETED: 250, ABANDONED: 120, FAILED_RETRYABLE: 80 } as const
const OPERATIONS = ['POST /orders', 'POST /refunds'] as const
const AN_HOUR = { leaseMs: 3_600_000, replayWindowMs: 3_600_000, failureRetentionMs: 3_600_000 } as const

/** Makes the plan's 1,000 records, alternating the two operations; returns the counts per operation. */
async function populate(store: IdempotencyStore): Promise<Record<string, Record<string, number>>> {
  const perOperation: Record<string, Record<string, number>> = {}
  const jobs: Promise<void>[] = []
  let i = 0
  for (const [state, count] of Object.entries(PLAN)) {
    for (let n = 0; n < count; n++, i++) {
      const operation = OPERATIONS[i % 2] as string
      const code = operationCode(operation)
      perOperation[code] = perOperation[code] ?? {}
      const counts = perOperation[code] as Record<string, number>
      counts[state] = (counts[state] ?? 0) + 1
      jobs.push(
        (async () => {
          const key = storeKey(store.keyPrefix, 1, code, randomBytes(32).toString('hex'))
          // Times of an hour: nothing expires while a loaded machine runs the CLI's four processes.
          const request = claimRequest(store, { key, operation, start: state !== 'CLAIMED', ...AN_HOUR })
          const claim = await store.claim(request)
          if (claim.kind !== ClaimReply.ACQUIRED) throw new Error(claim.kind)
          const ref = { key, owner: request.owner, attempt: claim.attempt, rev: claim.rev }
          if (state === 'COMPLETED') await store.complete(ref, Buffer.from('{}'), request)
          if (state === 'ABANDONED') await store.markFailed(ref, FailureKind.UNKNOWN, request)
          if (state === 'FAILED_RETRYABLE') await store.markFailed(ref, FailureKind.RETRYABLE, request)
        })(),
      )
      if (jobs.length >= 50) await Promise.all(jobs.splice(0))
    }
  }
  await Promise.all(jobs)
  return perOperation
}

describe.each(STORES)('listRecords and recordStats on the %s store', (_name, create) => {
  let backing: TestStore
  let perOperation: Record<string, Record<string, number>>

  beforeAll(async () => {
    backing = await create()
    perOperation = await populate(backing.store)
  })

  afterAll(async () => {
    await backing.teardown()
  })

  it('counts 1,000 records by state and by operation, exactly', async () => {
    const progress: number[] = []
    const stats = await recordStats({ store: backing.store, onProgress: (n) => progress.push(n) })
    expect(stats).toEqual({
      scanned: 1_000,
      byState: PLAN,
      byOperation: perOperation,
      operationNames: Object.fromEntries(OPERATIONS.map((operation) => [operationCode(operation), operation])),
      expired: 0,
    })
    expect(progress).toEqual([1_000])
  })

  it('lists the records of one state, and none unchanged for an hour', async () => {
    const { records, scanned } = await listRecords({ store: backing.store, state: 'ABANDONED' })
    expect(scanned).toBe(1_000)
    expect(records).toHaveLength(PLAN.ABANDONED)
    for (const record of records) {
      expect(record).toMatchObject({ state: 'ABANDONED', attempt: 1 })
      expect(record.digest).toMatch(/^[0-9a-f]{12}$/)
      expect(OPERATIONS.map((operation) => operationCode(operation))).toContain(record.operationCode)
    }
    expect((await listRecords({ store: backing.store, olderThanMs: 3_600_000 })).records).toEqual([])
    expect((await listRecords({ store: backing.store, limit: 7 })).records).toHaveLength(7)
  })
})

describe.each([
  ['redis', () => inject('redisUrl'), STORES.find(([name]) => name === 'redis')?.[1]],
  ['postgres', () => inject('postgresUrl'), STORES.find(([name]) => name === 'postgres')?.[1]],
] as const)('idemkit list and stats on %s', (_name, url, create) => {
  let backing: TestStore
  let perOperation: Record<string, Record<string, number>>

  beforeAll(async () => {
    if (create === undefined) throw new Error('no such store')
    backing = await create()
    perOperation = await populate(backing.store)
  })

  afterAll(async () => {
    await backing.teardown()
  })

  it('counts what the test made, and lists one state', async () => {
    const prefix = ['--key-prefix', backing.store.keyPrefix]
    const stats = await cli(['stats', '--store', url(), ...prefix, '--json'])
    expect(stats.code).toBe(0)
    expect(JSON.parse(stats.stdout)).toEqual({
      scanned: 1_000,
      byState: PLAN,
      byOperation: perOperation,
      operationNames: Object.fromEntries(OPERATIONS.map((operation) => [operationCode(operation), operation])),
      expired: 0,
    })

    const listed = await cli(['list', '--store', url(), ...prefix, '--state', 'FAILED_RETRYABLE', '--json'])
    expect(listed.code).toBe(0)
    expect(JSON.parse(listed.stdout).records).toHaveLength(PLAN.FAILED_RETRYABLE)

    const text = await cli(['stats', '--store', url(), ...prefix])
    expect(text.stdout).toMatch(/^1000 records scanned, 0 expired/)
    expect(text.stdout).toMatch(/^ {2}ABANDONED {9}120$/m)
    // Operations by name, with the code list prints beside each record.
    for (const operation of OPERATIONS) {
      expect(text.stdout).toContain(`operation ${operation} (${operationCode(operation)}): `)
    }

    const bad = await cli(['list', '--store', url(), '--older-than', 'ten minutes'])
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain('--older-than must be like')
  }, 120_000)
})
