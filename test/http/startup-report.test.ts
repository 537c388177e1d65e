/**
 * The startup report: each store's `describe()` on the suite's own servers, and the one log
 * line (plus a warning per unsafe setting) the Fastify plugin writes once the app is ready; the
 * same report on the `idemkit:event` channel.
 */
import diagnostics from 'node:diagnostics_channel'
import { Writable } from 'node:stream'
import Fastify from 'fastify'
import { describe, expect, it } from 'vitest'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { EVENT_CHANNEL } from '../../src/core/channels.js'
import type { IdempotencyStore, StoreReport } from '../../src/core/store.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { postgresStore } from '../../src/stores/postgres/index.js'
import { until } from '../helpers/fault-app.js'
import { createPostgresStore, createRedisStore, testPostgresPool } from '../helpers/stores.js'

/** A Fastify app on `store` with a JSON log captured; resolves with the report's lines once written. */
async function startupLines(store: IdempotencyStore) {
  const lines: { level: number; msg: string; idempotency?: StoreReport }[] = []
  const stream = new Writable({
    write(chunk, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line))
      done()
    },
  })
  const published: unknown[] = []
  const listener = (message: unknown) => published.push(message)
  diagnostics.subscribe(EVENT_CHANNEL, listener)
  const app = Fastify({ logger: { level: 'info', stream } })
  try {
    await app.register(fastifyIdempotency, {
      store,
      secrets: { current: 1, keys: { 1: 's'.repeat(32) } },
      anonymous: true,
    })
    await app.ready()
    const ready = await until('the startup report', () => lines.find((line) => line.msg === 'idempotency store ready'))
    const warnings = lines.filter((line) => line.level === 40 && line.msg.startsWith('idempotency store: '))
    return { ready, warnings: warnings.map((line) => line.msg), published }
  } finally {
    diagnostics.unsubscribe(EVENT_CHANNEL, listener)
    await app.close()
  }
}

describe('the startup report', () => {
  it('says the memory store keeps records in this process only', async () => {
    const store = memoryStore()
    const { ready, warnings, published } = await startupLines(store)
    expect(ready.idempotency).toMatchObject({ store: 'memory', settings: { records: 0 } })
    expect(warnings).toEqual([
      'idempotency store: records live in this process only: other instances do not see them and a restart loses them',
    ])
    expect(published).toContainEqual(expect.objectContaining({ store: 'memory', type: 'store-ready' }))
    await store.close()
  })

  it('gives Redis’s version, mode, eviction policy and persistence, and warns without an append-only file', async () => {
    const { store, teardown } = await createRedisStore()
    try {
      const { ready, warnings } = await startupLines(store)
      const report = ready.idempotency as StoreReport
      expect(report).toMatchObject({ store: 'redis', mode: 'standalone' })
      expect(report.version).toMatch(/^\d+\.\d+\.\d+$/)
      const node = Object.keys(report.settings)[0]?.split(' ')[0]
      expect(report.settings).toEqual({ [`${node} maxmemory-policy`]: 'noeviction', [`${node} appendonly`]: false })
      // The suite's redis-server runs without AOF.
      expect(warnings).toEqual([
        `idempotency store: ${node}: appendonly is off: a Redis restart loses the records written since its last snapshot`,
      ])
    } finally {
      await teardown()
    }
  })

  it('gives PostgreSQL’s version and commit settings, and warns about fsync off and a table not migrated', async () => {
    const { store, teardown } = await createPostgresStore()
    try {
      const { ready, warnings } = await startupLines(store)
      const report = ready.idempotency as StoreReport
      expect(report).toMatchObject({
        store: 'postgres',
        settings: { table: 'public.idemkit_records', synchronous_commit: 'on', fsync: 'off', logged: true },
      })
      expect(report.version).toMatch(/^\d+\.\d+/)
      // The suite's cluster runs with fsync off (tests need no durability across a power cut).
      expect(warnings).toEqual([
        'idempotency store: fsync is off: a power loss or an OS crash can lose committed records',
      ])
    } finally {
      await teardown()
    }
    const pool = testPostgresPool()
    const missing = postgresStore({ pool, table: 'idemkit_never_described', sweepIntervalMs: 0 })
    try {
      expect((await missing.describe()).warnings).toContain(
        'public.idemkit_never_described does not exist: run store.migrate()',
      )
    } finally {
      await missing.close()
      await pool.end()
    }
  })
})
