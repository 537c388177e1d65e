/**
 * `npm run bench:postgres -- --partitions`: batched deletes (the store's sweeper) against time
 * partitioning (dropping a whole partition, as pg_partman does), measured on a cluster of its own
 * (fsync off, autovacuum off on the tables measured so that the dead tuples are read as left).
 *
 * Two tables with the records' columns, each holding 100,000 expired rows and 100,000 live ones:
 * - `batched`: the store's own table (`migrate()`: `key` the primary key, an index on
 *   `expires_at`);
 * - `partitioned`: partitioned by range of the immutable `created_at`, one partition an hour over
 *   26 hours (a day's replay window and then some), the expired rows all in the oldest; its
 *   primary key must include the partition key: (`key`, `created_at`).
 *
 * It prints, for each: the time to remove the expired rows (the store's `sweep()`, statements of
 * 1,000 rows; DETACH and DROP of the oldest partition), the dead tuples left and the VACUUM that
 * takes them; lookups by key alone (the first thing every claim does) per second; the share of HOT
 * updates among 20,000 completions (an update moving `expires_at`); and what PostgreSQL answers
 * when the partitioned table is asked for what claims serialise on (one row per key).
 *
 * Nothing here asserts a timing; the figures are what the machine gave.
 */
import { randomBytes } from 'node:crypto'
import { cpus, loadavg } from 'node:os'
import pg from 'pg'
import { startPostgresServer } from '../postgres-server.js'
import { ensureBuilt } from './common.js'

const ROWS = 100_000
const HOURS = 26
const LOOKUPS = 20_000
const UPDATES = 20_000
const COLUMNS = `(key text NOT NULL, state text NOT NULL, owner text NOT NULL, attempt bigint NOT NULL, rev bigint NOT NULL,
  op text NOT NULL, fp text NOT NULL, codec text NOT NULL, policy text NOT NULL, lease_until timestamptz NOT NULL,
  replay_until timestamptz, expires_at timestamptz NOT NULL, resp bytea, created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL)`

/** `ms` as seconds with two decimals. */
const seconds = (ms: number) => `${(ms / 1_000).toFixed(2)} s`

async function timed(run: () => Promise<unknown>): Promise<number> {
  const started = performance.now()
  await run()
  return performance.now() - started
}

export async function runPartitions(): Promise<void> {
  ensureBuilt()
  const { postgresStore } = (await import(
    new URL('../../dist/src/stores/postgres/index.js', import.meta.url).href
  )) as typeof import('../../src/stores/postgres/index.js')
  const server = await startPostgresServer()
  const pool = new pg.Pool({ connectionString: server.url, max: 4 })
  pool.on('error', () => undefined)
  const store = postgresStore({ pool, schema: 'batched', table: 'records', sweepIntervalMs: 0, sweepBudgetMs: 600_000 })
  try {
    await store.migrate()
    const version = (await pool.query('SHOW server_version')).rows[0].server_version
    console.log(
      `PostgreSQL ${version} (fsync off), pg.Pool max 4, ${cpus().length} CPUs, load average at the start ${loadavg()
        .map((n) => n.toFixed(2))
        .join(' ')}\n`,
    )
    await pool.query(`CREATE SCHEMA part; CREATE TABLE part.records ${COLUMNS} PARTITION BY RANGE (created_at);
      ALTER TABLE part.records ADD PRIMARY KEY (key, created_at)`)
    // One hour for every statement below, whatever the clock reads by then.
    const hour = (await pool.query(`SELECT date_trunc('hour', now())::text AS b`)).rows[0].b as string
    // Partition h covers [base - (HOURS - 1 - h) hours, one hour later): h = 0 the oldest.
    await pool.query(`DO $$ DECLARE base timestamptz := '${hour}'; h int; BEGIN
      FOR h IN 0..${HOURS - 1} LOOP
        EXECUTE format('CREATE TABLE part.records_h%s PARTITION OF part.records FOR VALUES FROM (%L) TO (%L)', h,
          base - (${HOURS - 1} - h) * interval '1 hour', base - (${HOURS - 2} - h) * interval '1 hour');
      END LOOP; END $$`)
    // The same fill factor and no autovacuum for both: the updates find room on their page alike,
    // and the dead tuples are read as the removal left them.
    await pool.query(`ALTER TABLE batched.records SET (fillfactor = 80, autovacuum_enabled = false)`)
    for (let h = 0; h < HOURS; h++) {
      await pool.query(`ALTER TABLE part.records_h${h} SET (fillfactor = 80, autovacuum_enabled = false)`)
    }
    const response = randomBytes(100)
    for (const table of ['batched.records', 'part.records']) {
      // Expired: created in the oldest hour, expired a minute ago. Live: created over the last
      // 24 hours, replaying for another day.
      await pool.query(
        `INSERT INTO ${table} SELECT 'k:expired-' || i, 'COMPLETED', repeat('0', 64), 1, 2, 'POST /orders', 'f1', 'http-2', '1',
           b - interval '24 hours', b, now() - interval '1 minute', $2, b - interval '25 hours' + (i % 3600) * interval '1 second', b
         FROM generate_series(1, $1::int) i, CAST($3 AS timestamptz) b`,
        [ROWS, response, hour],
      )
      await pool.query(
        `INSERT INTO ${table} SELECT 'k:live-' || i, 'COMPLETED', repeat('0', 64), 1, 2, 'POST /orders', 'f1', 'http-2', '1',
           now(), now() + interval '1 day', now() + interval '1 day', $2, b - interval '24 hours' + i * interval '864 milliseconds', b
         FROM generate_series(1, $1::int) i, CAST($3 AS timestamptz) b`,
        [ROWS, response, hour],
      )
    }
    await pool.query('VACUUM ANALYZE batched.records')
    await pool.query('VACUUM ANALYZE part.records')

    const dead = async (schema: string) => {
      // An idle backend's counts reach the statistics within PostgreSQL's idle flush interval
      // (10 s) of its last transaction.
      await new Promise((resolve) => setTimeout(resolve, 11_000))
      const { rows } = await pool.query(
        `SELECT pg_stat_clear_snapshot(), coalesce(sum(n_dead_tup), 0)::bigint AS dead,
           coalesce(sum(n_tup_upd), 0)::bigint AS upd, coalesce(sum(n_tup_hot_upd), 0)::bigint AS hot
         FROM pg_stat_user_tables WHERE schemaname = $1`,
        [schema],
      )
      return { dead: Number(rows[0].dead), updates: Number(rows[0].upd), hot: Number(rows[0].hot) }
    }

    console.log(`Removing ${ROWS} expired rows (${ROWS} live rows stay):`)
    let deleted = 0
    const sweepMs = await timed(async () => {
      deleted = await store.sweep()
    })
    const sweptDead = await dead('batched')
    const vacuumBatchedMs = await timed(() => pool.query('VACUUM batched.records'))
    console.log(
      `  batched deletes (the store's sweep(), statements of 1000): ${deleted} rows in ${seconds(sweepMs)}, ` +
        `${sweptDead.dead} dead tuples left, VACUUM ${seconds(vacuumBatchedMs)}`,
    )
    const dropMs = await timed(async () => {
      await pool.query('ALTER TABLE part.records DETACH PARTITION part.records_h0')
      await pool.query('DROP TABLE part.records_h0')
    })
    const droppedDead = await dead('part')
    const vacuumPartMs = await timed(() => pool.query('VACUUM part.records'))
    console.log(
      `  a partition dropped (DETACH PARTITION, DROP TABLE): ${ROWS} rows in ${seconds(dropMs)}, ` +
        `${droppedDead.dead} dead tuples left, VACUUM ${seconds(vacuumPartMs)}\n`,
    )

    const plan = await pool.query(`EXPLAIN SELECT * FROM part.records WHERE key = 'k:live-1'`)
    const scanned = new Set(plan.rows.flatMap((row) => (row['QUERY PLAN'] as string).match(/records_h\d+\b/g) ?? []))
    console.log(
      `Lookups by key alone (what every claim reads first), ${LOOKUPS} each over 4 connections; ` +
        `on the partitioned table the plan reads each of its ${scanned.size} partitions:`,
    )
    for (const table of ['batched.records', 'part.records']) {
      let next = 0
      const ms = await timed(() =>
        Promise.all(
          Array.from({ length: 4 }, async () => {
            while (next < LOOKUPS) {
              const i = (next++ * 7_919) % ROWS
              await pool.query({
                name: `lookup-${table}`,
                text: `SELECT state, resp FROM ${table} WHERE key = $1`,
                values: [`k:live-${i + 1}`],
              })
            }
          }),
        ),
      )
      console.log(`  ${table}: ${Math.round(LOOKUPS / (ms / 1_000))} lookups/s`)
    }

    console.log(`\n${UPDATES} completions (an update that moves expires_at, one statement a key):`)
    for (const [table, schema] of [
      ['batched.records', 'batched'],
      ['part.records', 'part'],
    ] as const) {
      const before = await dead(schema)
      let next = 0
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          while (next < UPDATES) {
            const i = next++
            await pool.query({
              name: `complete-${table}`,
              text: `UPDATE ${table} SET rev = rev + 1, expires_at = clock_timestamp() + interval '1 day',
                replay_until = clock_timestamp() + interval '1 day', updated_at = clock_timestamp() WHERE key = $1`,
              values: [`k:live-${i + 1}`],
            })
          }
        }),
      )
      const after = await dead(schema)
      const updates = after.updates - before.updates
      const hot = after.hot - before.hot
      console.log(`  ${table}: ${updates} updates, ${hot} HOT (${((100 * hot) / Math.max(1, updates)).toFixed(1)} %)`)
    }

    console.log('\nWhat claims serialise on, one row per key, asked of the partitioned table:')
    for (const [what, statement] of [
      ['a unique index on key alone', 'CREATE UNIQUE INDEX ON part.records (key)'],
      [
        "the claim's INSERT ... ON CONFLICT (key) DO NOTHING",
        `INSERT INTO part.records SELECT * FROM part.records WHERE key = 'k:live-1' ON CONFLICT (key) DO NOTHING`,
      ],
    ] as const) {
      const answer = await pool.query(statement).then(
        () => 'accepted',
        (error: Error) => `refused: ${error.message}`,
      )
      console.log(`  ${what}: ${answer}`)
    }
    const twice = await pool
      .query(
        `INSERT INTO part.records SELECT key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, replay_until,
           expires_at, resp, created_at + interval '1 hour', updated_at FROM part.records WHERE key = 'k:live-1'`,
      )
      .then(
        async () => (await pool.query(`SELECT count(*)::int AS n FROM part.records WHERE key = 'k:live-1'`)).rows[0].n,
      )
    console.log(`  the same key inserted again an hour later: accepted, ${twice} rows of key k:live-1`)
    console.log(
      `\nload average at the end ${loadavg()
        .map((n) => n.toFixed(2))
        .join(' ')}`,
    )
  } finally {
    await store.close()
    await pool.end()
    await server.stop()
  }
}
