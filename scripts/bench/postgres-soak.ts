/**
 * `npm run bench:postgres -- --soak [--minutes 10] [--retention-s 120] [--concurrency 16]`: the
 * PostgreSQL store's retention under a sustained load, on a cluster of its own (fsync off,
 * autovacuum as PostgreSQL ships it) and one pg.Pool of 8 connections.
 *
 * First it measures the sweeper alone: 100,000 expired rows, deleted by one `sweep()` in
 * statements of `sweepBatch` (1,000) rows, as rows per second.
 *
 * Then, for `--minutes`, `--concurrency` loops make first executions as fast as they can (a
 * claim and a completion of a new key each: the store's calls of a first execution), every
 * record replaying for `--retention-s`, while the store's own sweeper runs with its defaults
 * (every 60 s, 1,000 rows a statement, a 2 s budget per round). Every 30 s it prints the claim rate of the period, the rows
 * (count), the dead tuples and autovacuum runs (pg_stat_user_tables), the table's and its
 * indexes' size, the share of HOT updates, what the sweeper deleted and how many rounds ended
 * behind, beside the window: the records made in the last (retention + sweep interval), what
 * the table holds when the sweeper keeps up. At the end: the largest ratio of rows to window.
 *
 * Nothing here asserts a timing; the figures are what the machine gave.
 */
import { randomBytes } from 'node:crypto'
import { cpus, loadavg } from 'node:os'
import pg from 'pg'
import type { ClaimRequest } from '../../src/index.js'
import type { PostgresStore, PostgresStoreEvent } from '../../src/stores/postgres/index.js'
import { startPostgresServer } from '../postgres-server.js'
import { ensureBuilt } from './common.js'

/** `--name value` from the command line, else `fallback`. */
function flag(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`)
  const value = at === -1 ? fallback : Number(process.argv[at + 1])
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number`)
  return value
}

/** The store's default sweepIntervalMs: the soak runs the sweeper as a user gets it. */
const SWEEP_INTERVAL_MS = 60_000
const REPORT_MS = 30_000
const RESPONSE = Buffer.alloc(100, 7)

export async function runSoak(): Promise<void> {
  const minutes = flag('minutes', 10)
  const retentionMs = flag('retention-s', 120) * 1_000
  const concurrency = flag('concurrency', 16)
  ensureBuilt()
  const { postgresStore } = (await import(
    new URL('../../dist/src/stores/postgres/index.js', import.meta.url).href
  )) as typeof import('../../src/stores/postgres/index.js')
  const server = await startPostgresServer()
  const pool = new pg.Pool({ connectionString: server.url, max: 8 })
  pool.on('error', () => undefined)
  const events = { deleted: 0, behind: 0, rounds: 0 }
  const onEvent = (event: PostgresStoreEvent) => {
    if (event.type === 'swept') {
      events.deleted += event.deleted
      events.rounds++
    } else if (event.type === 'sweep-behind') events.behind++
  }
  const stores: PostgresStore[] = []
  try {
    const setup = postgresStore({ pool, sweepIntervalMs: 0, sweepBudgetMs: 600_000 })
    stores.push(setup)
    await setup.migrate()
    const version = (await pool.query('SHOW server_version')).rows[0].server_version
    console.log(
      `PostgreSQL ${version} (fsync off, autovacuum default), pg.Pool max 8, ${cpus().length} CPUs, ` +
        `load average at the start ${loadavg()
          .map((n) => n.toFixed(2))
          .join(' ')}\n`,
    )

    // The sweeper alone: batched deletes of expired rows.
    const expired = 100_000
    await pool.query(
      `INSERT INTO idemkit_records (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, replay_until, expires_at, resp, created_at, updated_at)
       SELECT 'soak:idem:1:d1:op:expired-' || i, 'COMPLETED', repeat('0', 64), 1, 2, 'POST /orders', 'f1:soak', 'http-2', '1',
         now() - interval '2 minutes', now() - interval '1 minute', now() - interval '1 minute', $2, now() - interval '2 minutes', now() - interval '2 minutes'
       FROM generate_series(1, $1::int) i`,
      [expired, RESPONSE],
    )
    const sweepStarted = performance.now()
    const swept = await setup.sweep()
    const sweepSeconds = (performance.now() - sweepStarted) / 1_000
    console.log(
      `sweep of ${expired} expired rows (statements of 1000): ${swept} deleted in ${sweepSeconds.toFixed(2)} s, ` +
        `${Math.round(swept / sweepSeconds)} rows/s\n`,
    )
    await pool.query('VACUUM idemkit_records')

    const store = postgresStore({ pool, onEvent })
    stores.push(store)
    const times = { leaseMs: 30_000, failureRetentionMs: retentionMs, replayWindowMs: retentionMs }
    const tag = randomBytes(4).toString('hex')
    let made = 0
    let errors = 0
    let running = true
    const loops = Array.from({ length: concurrency }, async (_, loop) => {
      for (let i = 0; running; i++) {
        const request: ClaimRequest = {
          key: `soak:idem:1:d1:op:${tag}-${loop}-${i}`,
          owner: randomBytes(32).toString('hex'),
          fingerprint: 'f1:soak',
          operation: 'POST /orders',
          codec: 'http-2',
          policy: '1',
          start: true,
          expiredExecution: 'recover',
          ...times,
        }
        try {
          const claim = await store.claim(request)
          if (claim.kind !== 'ACQUIRED') throw new Error(`claim answered ${claim.kind}`)
          await store.complete({ key: request.key, owner: request.owner, attempt: 1, rev: claim.rev }, RESPONSE, times)
          made++
        } catch {
          errors++
        }
      }
    })

    console.log(
      `${minutes} min of first executions (claim + complete of a new key), ${concurrency} loops, ` +
        `records replaying ${retentionMs / 1_000} s, the store's sweeper every ${SWEEP_INTERVAL_MS / 1_000} s\n`,
    )
    console.log(
      '| t (s) | claims/s | rows | window | dead tuples | autovacuums | table MB | indexes MB | HOT updates | swept | rounds behind |',
    )
    console.log('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    const started = performance.now()
    let lastMade = 0
    let lastAt = started
    let maxRows = 0
    let lastRows = 0
    // The rows a retention window holds: the records made in the last (retention + sweep
    // interval), from the samples of `made` taken at each report.
    const samples: { at: number; made: number }[] = [{ at: started, made: 0 }]
    const spanMs = retentionMs + SWEEP_INTERVAL_MS
    let worst = 0
    const end = started + minutes * 60_000
    while (performance.now() < end) {
      await new Promise((resolve) => setTimeout(resolve, Math.min(REPORT_MS, end - performance.now())))
      const now = performance.now()
      const rate = (made - lastMade) / ((now - lastAt) / 1_000)
      lastMade = made
      lastAt = now
      const { rows } = await pool.query(
        `SELECT (SELECT count(*) FROM idemkit_records)::int AS rows, s.n_dead_tup::int AS dead, s.autovacuum_count::int AS vacuums,
           pg_relation_size('idemkit_records') AS table, pg_indexes_size('idemkit_records') AS indexes,
           s.n_tup_upd::bigint AS updates, s.n_tup_hot_upd::bigint AS hot
         FROM pg_stat_user_tables s WHERE s.relid = 'idemkit_records'::regclass`,
      )
      const row = rows[0]
      lastRows = row.rows
      maxRows = Math.max(maxRows, row.rows)
      samples.push({ at: now, made })
      const since = [...samples].reverse().find((sample) => sample.at <= now - spanMs) ?? samples[0]
      const window = made - (since?.made ?? 0)
      worst = Math.max(worst, row.rows / Math.max(1, window))
      const hot = Number(row.updates) === 0 ? 0 : (100 * Number(row.hot)) / Number(row.updates)
      console.log(
        `| ${Math.round((now - started) / 1_000)} | ${Math.round(rate)} | ${row.rows} | ${window} | ${row.dead} | ${row.vacuums} | ` +
          `${(Number(row.table) / 1_048_576).toFixed(1)} | ${(Number(row.indexes) / 1_048_576).toFixed(1)} | ` +
          `${hot.toFixed(1)} % | ${events.deleted} | ${events.behind} |`,
      )
    }
    running = false
    await Promise.all(loops)
    const seconds = (performance.now() - started) / 1_000
    const meanRate = made / seconds
    console.log(
      `\n${made} first executions in ${seconds.toFixed(0)} s: ${Math.round(meanRate)}/s mean, ${errors} errors; ` +
        `the sweeper deleted ${events.deleted} rows in ${events.rounds} rounds, ${events.behind} reported behind`,
    )
    console.log(
      `rows against a retention window (the records made in the last ${spanMs / 1_000} s: retention + sweep interval): ` +
        `at most ${worst.toFixed(2)} × (most rows seen ${maxRows}, at the end ${lastRows})`,
    )
    console.log(
      `load average at the end ${loadavg()
        .map((n) => n.toFixed(2))
        .join(' ')}`,
    )
  } finally {
    for (const store of stores) await store.close()
    await pool.end()
    await server.stop()
  }
}
