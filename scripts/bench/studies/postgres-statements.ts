/**
 * `npx tsx scripts/bench/studies/postgres-statements.ts [--concurrency 4] [--rounds 8] [--batch 1000]`:
 * the PostgreSQL store's claim and completion functions beside plain statements that write the
 * same rows, on a cluster of its own (fsync off, synchronous_commit on), to see what the
 * PL/pgSQL calls cost (docs/postgresql.md "What was measured and not kept"). Each case is a
 * first execution (a claim of a new key with start, then its completion) or a replaying claim;
 * the cases take turns, `--batch` operations at a time on `--concurrency` connections, for
 * `--rounds` rounds. Prints, per case, the wall time per operation (quartiles of the rounds) and
 * PostgreSQL's CPU per operation (every PostgreSQL process, from /proc; the median round). The
 * plain completions are not the store's: each gives up something the function keeps, as named.
 * Nothing here asserts a timing.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { startPostgresServer } from '../../postgres-server.js'
import { ensureBuilt, option, postgresCpuUs } from '../common.js'

const CONCURRENCY = Number(option('--concurrency', '4'))
const ROUNDS = Number(option('--rounds', '8'))
const BATCH = Number(option('--batch', '1000'))
const RESPONSE = Buffer.alloc(100, 7)
const LEASE_MS = 30_000
const RETENTION_MS = 60_000
const REPLAY_MS = 86_400_000
const LOCK_TIMEOUT_MS = 1_000

ensureBuilt()
const core = (await import(
  new URL('../../../dist/src/index.js', import.meta.url).href
)) as typeof import('../../../src/index.js')
const server = await startPostgresServer()
const pool = new pg.Pool({ connectionString: server.url, max: CONCURRENCY })
pool.on('error', () => undefined)
const store = core.postgresStore({ pool, sweepIntervalMs: 0 })

const T = 'public.idemkit_records'
const ms = (value: string) => `${T}_ms_v2(${value})`
const clock = "date_trunc('milliseconds', clock_timestamp())"
const after = (at: string, n: number) => `${at} + $${n}::bigint * interval '1 millisecond'`
const CLAIM_FN = `SELECT r FROM ${T}_claim_v3($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`
const COMPLETE_FN = `SELECT r FROM ${T}_complete_v3($1, $2, $3, $4, $5, $6, $7)`
/** The claim as one statement: the row read without a lock, the insert only when there is none. */
const CLAIM_PLAIN = `WITH cur AS (SELECT state, fp, replay_until, expires_at, resp, codec, policy FROM ${T} WHERE key = $1),
  ins AS (INSERT INTO ${T} (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, replay_until, expires_at, resp, created_at, updated_at)
    SELECT $1, CASE WHEN $7::boolean THEN 'EXECUTING' ELSE 'CLAIMED' END, $2, 1, 1, $4, $3, $5, $6, ${after('c.now', 8)}, NULL,
      ${after(after('c.now', 8), 9)}, NULL, c.now, c.now
    FROM (SELECT set_config('lock_timeout', $10::integer::text || 'ms', true) AS lt, ${clock} AS now) c
    WHERE NOT EXISTS (SELECT 1 FROM cur) AND c.lt IS NOT NULL
    ON CONFLICT (key) DO NOTHING RETURNING lease_until)
  SELECT (SELECT ${ms('lease_until')} FROM ins), ${ms(clock)}, cur.state, cur.fp, ${ms('cur.replay_until')},
    ${ms('cur.expires_at')}, cur.resp, cur.codec, cur.policy
  FROM (SELECT 1) one LEFT JOIN cur ON true`
const checks = "t.key = $1 AND t.owner = $2 AND t.attempt = $3::bigint AND t.rev = $4::bigint AND t.state = 'EXECUTING'"
/** A plain UPDATE: a row lock makes it wait without bound; its clock is read before the wait. */
const COMPLETE_UPDATE = `UPDATE ${T} t SET state = 'COMPLETED', rev = t.rev + 1, replay_until = ${after(clock, 5)},
  expires_at = ${after(clock, 5)}, resp = $6, updated_at = ${clock}
  WHERE ${checks} AND t.expires_at > clock_timestamp() RETURNING t.rev`
/** The same with lock_timeout set first in the statement: bounded, its clock still read before a wait. */
const COMPLETE_BOUNDED = `WITH c AS (SELECT set_config('lock_timeout', $7::integer::text || 'ms', true) AS lt)
  UPDATE ${T} t SET state = 'COMPLETED', rev = t.rev + 1, replay_until = ${after(clock, 5)},
    expires_at = ${after(clock, 5)}, resp = $6, updated_at = ${clock}
  FROM c WHERE c.lt IS NOT NULL AND ${checks} AND t.expires_at > clock_timestamp() RETURNING t.rev`
/** The row locked without waiting (`SKIP LOCKED`), the clock read once it is held, then the UPDATE. */
const COMPLETE_SKIP_LOCKED = `WITH held AS (SELECT r.key FROM ${T} r WHERE r.key = $1 FOR UPDATE SKIP LOCKED),
  n AS (SELECT held.key, ${clock} AS now FROM held),
  done AS (UPDATE ${T} t SET state = 'COMPLETED', rev = t.rev + 1, replay_until = ${after('n.now', 5)},
      expires_at = ${after('n.now', 5)}, resp = $6, updated_at = n.now
    FROM n WHERE t.key = n.key AND ${checks.replace('t.key = $1 AND ', '')} AND t.expires_at > n.now RETURNING t.rev)
  SELECT (SELECT rev FROM done)`

const tag = randomBytes(4).toString('hex')
const owner = () => randomBytes(32).toString('hex')
const query = (name: string, text: string, values: unknown[]) => pool.query({ name, text, values, rowMode: 'array' })
const claimValues = (key: string, holder: string) => [
  key,
  holder,
  'f1:bench',
  'POST /orders',
  'http-2',
  '1',
  true,
  false,
  LEASE_MS,
  RETENTION_MS,
  [],
  LOCK_TIMEOUT_MS,
]
/** The plain claim's parameters: no takeover flag, no legacy fingerprints (the caller compares them). */
const plainClaimValues = (key: string, holder: string) => {
  const values = claimValues(key, holder)
  return [...values.slice(0, 7), LEASE_MS, RETENTION_MS, LOCK_TIMEOUT_MS]
}
const completeValues = (key: string, holder: string) => [key, holder, 1, 1, REPLAY_MS, RESPONSE]

async function claimFn(key: string, holder: string): Promise<void> {
  const { rows } = await query('claim_fn', CLAIM_FN, claimValues(key, holder))
  if (!String(rows[0]?.[0]).startsWith('ACQUIRED')) throw new Error(`claim answered ${rows[0]?.[0]}`)
}

async function completeWith(name: string, text: string, values: unknown[]): Promise<void> {
  const { rows } = await query(name, text, values)
  const answer = rows[0]?.[0]
  if (answer === null || answer === undefined || String(answer).startsWith('NOT')) {
    throw new Error(`${name} wrote nothing`)
  }
}

async function claimPlain(key: string, holder: string): Promise<void> {
  const { rows } = await query('claim_plain', CLAIM_PLAIN, plainClaimValues(key, holder))
  if (rows[0]?.[0] === null) throw new Error('the plain claim inserted nothing')
}

/** A first execution of a new key: `claim`, then the completion `text` (with lock_timeout when `bounded`). */
function firstExecution(
  claim: typeof claimFn,
  name: string,
  text: string,
  bounded: boolean,
): (i: number) => Promise<void> {
  return async (i) => {
    const key = `${claim.name}:${name}:${tag}:${i}`
    const holder = owner()
    await claim(key, holder)
    const values = completeValues(key, holder)
    await completeWith(name, text, bounded ? [...values, LOCK_TIMEOUT_MS] : values)
  }
}

const replayKeys = Array.from({ length: 8 }, (_, i) => `bench:idem:1:d1:op:${tag}-replay-${i}`)
const cases: ReadonlyArray<readonly [string, (i: number) => Promise<void>]> = [
  ['claim_v3 + complete_v3 (the store)', firstExecution(claimFn, 'complete_fn', COMPLETE_FN, true)],
  ['plain claim + complete_v3', firstExecution(claimPlain, 'complete_fn', COMPLETE_FN, true)],
  [
    'claim_v3 + plain UPDATE (unbounded wait, clock before it)',
    firstExecution(claimFn, 'complete_update', COMPLETE_UPDATE, false),
  ],
  [
    'claim_v3 + UPDATE after set_config (clock before a wait)',
    firstExecution(claimFn, 'complete_bounded', COMPLETE_BOUNDED, true),
  ],
  ['claim_v3 + SKIP LOCKED, then UPDATE', firstExecution(claimFn, 'complete_skip', COMPLETE_SKIP_LOCKED, false)],
  [
    'claim_v3 (replay)',
    async (i) => {
      const { rows } = await query('claim_fn', CLAIM_FN, claimValues(replayKeys[i % 8] as string, owner()))
      if (!String(rows[0]?.[0]).startsWith('COMPLETED_REPLAY')) throw new Error(`claim answered ${rows[0]?.[0]}`)
    },
  ],
  [
    'plain claim (replay)',
    async (i) => {
      const { rows } = await query('claim_plain', CLAIM_PLAIN, plainClaimValues(replayKeys[i % 8] as string, owner()))
      if (rows[0]?.[2] !== 'COMPLETED') throw new Error('the plain claim found no completed row')
    },
  ],
]

try {
  await store.migrate()
  for (const key of replayKeys) {
    const holder = owner()
    await claimFn(key, holder)
    await completeWith('complete_fn', COMPLETE_FN, [...completeValues(key, holder), LOCK_TIMEOUT_MS])
  }
  for (const [, run] of cases) await run(1e9) // warm: every statement prepared
  const figures = new Map<string, { wallUs: number; postgresUs: number }[]>()
  let next = 0
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, run] of cases) {
      const until = next + BATCH
      const postgres0 = postgresCpuUs(server.pid)
      const started = performance.now()
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next < until) await run(next++)
        }),
      )
      const wallUs = ((performance.now() - started) * 1000) / BATCH
      figures.set(name, [
        ...(figures.get(name) ?? []),
        { wallUs, postgresUs: (postgresCpuUs(server.pid) - postgres0) / BATCH },
      ])
    }
  }
  const at = (values: number[], q: number) =>
    Math.round([...values].sort((a, b) => a - b)[Math.floor((values.length - 1) * q)] as number)
  console.log(
    `PostgreSQL ${(await pool.query('SHOW server_version')).rows[0].server_version}, ${CONCURRENCY} connections, ` +
      `${ROUNDS} rounds of ${BATCH} operations per case, the cases taking turns\n`,
  )
  console.log('| case | µs per operation (p25 / median / p75) | PostgreSQL CPU µs per operation (median) |')
  console.log('| --- | ---: | ---: |')
  for (const [name, rows] of figures) {
    const wall = rows.map((row) => row.wallUs)
    console.log(
      `| ${name} | ${at(wall, 0.25)} / ${at(wall, 0.5)} / ${at(wall, 0.75)} | ${at(
        rows.map((row) => row.postgresUs),
        0.5,
      )} |`,
    )
  }
} finally {
  await store.close()
  await pool.end()
  await server.stop()
}
