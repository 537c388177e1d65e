/**
 * `npm run bench:postgres`: what the PostgreSQL store's calls cost PostgreSQL and the client,
 * without HTTP, beside the plain statements that do the same writes, on a cluster of its own
 * (fsync off, synchronous_commit on) and one pg.Pool of 4 connections. For each concurrency it
 * runs, in one process and one after another:
 *
 * - `SELECT 1 ×2`: two pooled round trips doing nothing (the floor of a first execution);
 * - `INSERT + UPDATE`: a plain insert of a row and an update storing a 100-byte response, the
 *   least a first execution writes;
 * - `claim + complete`: the store's two calls of a first execution (postgresStore, as the layer
 *   makes them);
 * - `SELECT by key`: a plain read of one row (the floor of a replay);
 * - `claim (replay)`: the store's replaying claim of a completed key;
 * - `claim + transaction + complete`: a first execution of a `transaction: true` run (BEGIN, the
 *   completion in the transaction, COMMIT), and `… + 1 step`: the same with one step of the
 *   handler's (its point looked up, written fenced, COMMIT and the next BEGIN) that writes
 *   nothing of its own: the difference is what a step costs.
 *
 * Before the table: what `keyFor(name)` costs (a name's first derivation in a run, an HMAC).
 *
 * Prints operations per second, PostgreSQL's CPU per operation (every PostgreSQL process, from
 * /proc) and the client's. Nothing here asserts a timing. `--rounds R` splits each case's
 * operations into R rounds, the cases taking turns round by round, and prints the median round
 * with the range: a machine's slow spell then falls on every case alike. `--baseline <dir>`
 * adds the store's two cases as another checkout builds them (its `dist/`, on the same table and
 * pool), each beside this build's, 5 rounds unless `--rounds` says otherwise. With `--soak`: the soak of
 * postgres-soak.ts instead (retention under a sustained load); with `--partitions`: batched
 * deletes against dropping partitions (postgres-partitions.ts).
 */
import { randomBytes } from 'node:crypto'
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import pg from 'pg'
import type { IdempotencyStore } from '../../src/index.js'
import { startPostgresServer } from '../postgres-server.js'
import { ensureBuilt, median, option, postgresCpuUs } from './common.js'
import { claimOf, firstExecution, keyForMicros, RESPONSE, transactional } from './steps.js'

const N = Number(process.env.N ?? 5_000)
/** `--baseline <dir>`: another checkout whose built store runs beside this one. */
const baselineDir = option('--baseline', undefined)
const ROUNDS = Number(option('--rounds', baselineDir === undefined ? '1' : '5'))
const CONCURRENCY = [1, 4, 32]

if (process.argv.includes('--soak')) {
  // `npm run bench:postgres -- --soak`: retention under a sustained load (postgres-soak.ts).
  const { runSoak } = await import('./postgres-soak.js')
  await runSoak()
  process.exit(0)
}

if (process.argv.includes('--partitions')) {
  // `npm run bench:postgres -- --partitions`: batched deletes against dropping partitions.
  const { runPartitions } = await import('./postgres-partitions.js')
  await runPartitions()
  process.exit(0)
}

ensureBuilt()
const core = (await import(
  new URL('../../dist/src/index.js', import.meta.url).href
)) as typeof import('../../src/index.js')
const server = await startPostgresServer()
const pool = new pg.Pool({ connectionString: server.url, max: 4 })
pool.on('error', () => undefined)
type BenchStore = IdempotencyStore & { migrate(): Promise<unknown> }
const store: BenchStore = core.postgresStore({ pool, sweepIntervalMs: 0 })
const baseline: BenchStore | undefined =
  baselineDir === undefined
    ? undefined
    : (
        (await import(
          pathToFileURL(resolve(baselineDir, 'dist/src/index.js')).href
        )) as typeof import('../../src/index.js')
      ).postgresStore({ pool, sweepIntervalMs: 0 })

const tag = randomBytes(4).toString('hex')
const owner = () => randomBytes(32).toString('hex')
const query = (name: string, text: string, values: unknown[]) => pool.query({ name, text, values, rowMode: 'array' })

const replayKeys = Array.from({ length: 8 }, (_, i) => `bench:idem:1:d1:op:${tag}-replay-${i}`)

type Case = readonly [string, (i: number, c: number) => Promise<unknown>]
const stores = { this: store, baseline: baseline ?? store }
/** A case of the store's, and the same on the baseline's store beside it when there is one. */
function storeCases(label: string, make: (name: keyof typeof stores) => Case[1]): Case[] {
  const own: Case = [label, make('this')]
  return baseline === undefined ? [own] : [own, [`${label}, baseline`, make('baseline')]]
}

const cases: readonly Case[] = [
  [
    'SELECT 1 ×2',
    async () => {
      await query('one', 'SELECT 1', [])
      await query('one', 'SELECT 1', [])
    },
  ],
  [
    'INSERT + UPDATE',
    async (i, c) => {
      const key = `plain:${tag}:${c}:${i}`
      await query(
        'plain_insert',
        `INSERT INTO idemkit_records (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, expires_at, created_at, updated_at)
         VALUES ($1, 'EXECUTING', $2, 1, 1, 'POST /orders', 'f1:bench', 'http-2', '1', now(), now() + interval '1 day', now(), now())`,
        [key, owner()],
      )
      await query(
        'plain_update',
        `UPDATE idemkit_records SET state = 'COMPLETED', rev = 2, resp = $2, replay_until = now() + interval '1 day' WHERE key = $1`,
        [key, RESPONSE],
      )
    },
  ],
  ...storeCases(
    'claim + complete',
    (name) => (i, c) => firstExecution(core, stores[name], `bench:idem:1:d1:op:${tag}-${name}-${c}-${i}`),
  ),
  [
    'SELECT by key',
    (i) => query('plain_read', 'SELECT * FROM idemkit_records WHERE key = $1', [replayKeys[Math.abs(i) % 8]]),
  ],
  ['claim + transaction + complete', (i, c) => transactional(core, store, `bench:idem:1:d1:op:${tag}-t-${c}-${i}`, 0)],
  [
    'claim + transaction + 1 step + complete',
    (i, c) => transactional(core, store, `bench:idem:1:d1:op:${tag}-s-${c}-${i}`, 1),
  ],
  ...storeCases('claim (replay)', (name) => async (i) => {
    const claim = await stores[name].claim(claimOf(replayKeys[Math.abs(i) % 8] as string))
    if (claim.kind !== core.ClaimReply.COMPLETED_REPLAY) throw new Error(`claim answered ${claim.kind}`)
  }),
]

try {
  await store.migrate()
  for (const key of replayKeys) await firstExecution(core, store, key)
  const postgresVersion = (await pool.query('SHOW server_version')).rows[0].server_version
  console.log(
    `PostgreSQL ${postgresVersion} (fsync off, synchronous_commit on), pg.Pool max 4, ${N} operations per case` +
      (ROUNDS === 1 ? '\n' : ` in ${ROUNDS} rounds, the cases taking turns: the median round (lowest-highest)\n`),
  )
  console.log(
    `keyFor(name), a new name: ${keyForMicros(core).toFixed(2)} µs per call (client CPU; a name asked again in a run is a Map look-up)\n`,
  )
  console.log('| case | concurrency | ops/s | PostgreSQL CPU µs/op | client CPU µs/op |')
  console.log('| --- | ---: | ---: | ---: | ---: |')
  const figure = (values: number[]) =>
    ROUNDS === 1
      ? String(Math.round(values[0] as number))
      : `${Math.round(median(values))} (${Math.round(Math.min(...values))}-${Math.round(Math.max(...values))})`
  for (const concurrency of CONCURRENCY) {
    for (const [, run] of cases) await run(-1, concurrency) // warm: the named statements prepared on a connection
    const rounds = new Map<string, number[][]>()
    let next = 0
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, run] of cases) {
        const until = next + Math.ceil(N / ROUNDS)
        const first = next
        const postgres0 = postgresCpuUs(server.pid)
        const client0 = process.cpuUsage()
        const started = performance.now()
        await Promise.all(
          Array.from({ length: concurrency }, async () => {
            while (next < until) await run(next++, concurrency)
          }),
        )
        const n = next - first
        const seconds = (performance.now() - started) / 1000
        const client = process.cpuUsage(client0)
        const postgres = postgresCpuUs(server.pid) - postgres0
        const row = [n / seconds, postgres / n, (client.user + client.system) / n]
        rounds.set(name, [...(rounds.get(name) ?? []), row])
      }
    }
    for (const [name] of cases) {
      const rows = rounds.get(name) ?? []
      const column = (i: number) => figure(rows.map((row) => row[i] as number))
      console.log(`| ${name} | ${concurrency} | ${column(0)} | ${column(1)} | ${column(2)} |`)
    }
  }
} finally {
  await store.close()
  await baseline?.close()
  await pool.end()
  await server.stop()
}
