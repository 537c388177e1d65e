/**
 * What the PostgreSQL store sends: one named prepared statement per call, a call of its PL/pgSQL
 * function (all in sql/functions/2-operations.sql) or, for a first execution and a replay, a
 * plain statement that the function backs (`fastStatements`), the values of each in order,
 * the operators' plain statements (read, scan, replace, delete, describe) and the advisory lock keys.
 */
import { createHash } from 'node:crypto'
import { causeBytes, encodeCause, type FailureCause } from '../../core/failure-cause.js'
import { FailureKind } from '../../core/record.js'
import type { ClaimRequest, OwnerRef, RecordTimes, RecordView } from '../../core/store.js'
import type { PostgresQuery } from './connection.js'

/** One prepared statement: its name (unique per schema version, schema and table) and its text. */
export interface Statement {
  readonly name: string
  readonly text: string
}

/**
 * The suffix of the functions the store calls (`<table>_inspect_v2`): the schema version that added
 * them. Schema 3 replaced their bodies only, with the same behaviour, so an instance of either
 * version calls the same functions.
 */
const FUNCTIONS = 'v2'
/**
 * The suffix of the claim and the completion of schema 4 (`<table>_claim_v3`, `_complete_v3`),
 * which answer in fewer columns; schema 2's stay for the instances of schema 3 during a rolling
 * deploy.
 */
const FAST_FUNCTIONS = 'v3'
/**
 * The suffix of the claim of schema 5 (`<table>_claim_v4`), which takes `expiredExecution` as
 * it is (`resume` as well): the one PL/pgSQL claim decision. Schema 4's `_claim_v3` and schema
 * 2's `_claim_v2` stay for the instances of those versions, as calls of it
 * (sql/functions/3-earlier-versions.sql).
 */
const CLAIM_FUNCTION = 'v4'
/**
 * The suffix of the failure mark of schema 6 (`<table>_mark_failed_v3`), which keeps the
 * failure's cause; schema 2's `_mark_failed_v2` stays for the instances of schema 5.
 */
const MARK_FAILED_FUNCTION = 'v3'
/** The suffix of schema 8's recovery point (`<table>_step_v1`). */
const STEP_FUNCTION = 'v1'
/** The suffix of schema 8's sweep (`<table>_sweep_v3`), which deletes the points of what it deletes. */
const STEP_SWEEP = 'v3'

/** The columns each function answers with, in order (its OUT parameters). */
const COLUMNS = {
  claim: 'r, resp, codec, policy',
  complete: 'r',
  inspect: 'kind, mine, attempt, rev, fp, op, lease_until, lease_left_ms, resp, codec, policy, replay_until',
  transition: 'kind, rev, state',
  renew: 'kind, lease_until, state',
  step: 'r, isolation',
} as const

/** Rows per scan statement. */
export const SCAN_PAGE = 500

/** The statements a run's transaction sends: the completion, and a step's point and opening. */
export interface TransactionStatements {
  readonly complete: Statement
  readonly step: Statement
  readonly stepPoint: Statement
}

/** Every statement of one store: the calls', the operators' and the catalog reads. */
export type Statements = ReturnType<typeof statements>

/**
 * The statements of the store of `<schema>.<table>` at schema `version`: their names carry a
 * tag of the three, so stores of other tables or versions may share a pool's connections.
 */
export function statements(schema: string, table: string, version: number) {
  const tag = createHash('sha256').update(`${version}:${schema}.${table}`).digest('hex').slice(0, 12)
  const fn = (name: string, params: number, columns: string, suffix: string = FUNCTIONS): Statement => ({
    name: `idemkit_${name}_${tag}`,
    text: `SELECT ${columns} FROM ${schema}.${table}_${name}_${suffix}(${Array.from({ length: params }, (_, i) => `$${i + 1}`).join(', ')})`,
  })
  return {
    claim: fn('claim', 12, COLUMNS.claim, CLAIM_FUNCTION),
    inspect: fn('inspect', 2, COLUMNS.inspect),
    start: fn('start', 7, COLUMNS.transition),
    complete: fn('complete', 7, COLUMNS.complete, FAST_FUNCTIONS),
    markFailed: fn('mark_failed', 8, COLUMNS.transition, MARK_FAILED_FUNCTION),
    release: fn('release', 5, COLUMNS.transition),
    renew: fn('renew', 7, COLUMNS.renew),
    step: fn('step', 6, COLUMNS.step, STEP_FUNCTION),
    ...fastStatements(schema, table, tag),
    /**
     * A step's opening, in the run's transaction: whether the transaction wrote since it began
     * (an xid is assigned), its isolation level, and the step's recovery point of the record's
     * generation (its `created_at`), if one committed.
     */
    stepPoint: {
      name: `idemkit_step_point_${tag}`,
      text: `SELECT txid_current_if_assigned() IS NOT NULL, current_setting('transaction_isolation'), s.key IS NOT NULL, s.result
        FROM (SELECT 1) one LEFT JOIN (${schema}.${table}_steps s JOIN ${schema}.${table} r ON r.key = s.key AND r.created_at = s.born)
        ON s.key = $1 AND s.name = $2`,
    },
    sweep: {
      name: `idemkit_sweep_${tag}`,
      text: `SELECT ${schema}.${table}_sweep_${STEP_SWEEP}($1, $2)`,
    },
    /** The table's comment (the schema version) and whether it exists: the catalog only, no lock. */
    schemaVersion: {
      name: `idemkit_schema_version_${tag}`,
      text: `SELECT obj_description(to_regclass($1), 'pg_class'), to_regclass($1) IS NOT NULL`,
    },
    ...operatorStatements(schema, table, tag),
  }
}

/**
 * The `lock_timeout` of a fast statement: it never waits for a row. A wait ends it with 55P03 and
 * the call goes to its function, which reads the clock after the lock (a plain statement that
 * waited for a row only locked by another session writes with the clock it read before the wait).
 */
export const FAST_LOCK_TIMEOUT = '1ms'

/**
 * The two plain statements of a first execution and a replay (docs/design.md §6, "PostgreSQL's
 * fast statements"): no PL/pgSQL, each the answer of its function where it is certain and no row
 * at all where it is not, and the call then goes to the function. Both take one clock reading at
 * their start, with `lock_timeout` set for their own transaction only (`set_config(..., true)`).
 *
 * - `fastClaim`: inserts a new key's row (`ACQUIRED`, as `_claim_v4` writes it); on a row already
 *   there, answers from the statement's own snapshot a live `COMPLETED` row with this fingerprint
 *   (or a legacy one: `COMPLETED_REPLAY`, its response) and a live row with another
 *   (`FINGERPRINT_MISMATCH`). Anything else (an expired row, a request in flight, a takeover, a
 *   row committed by a concurrent claim after the snapshot) is no row.
 * - `fastComplete`: the completion as one `UPDATE` fenced by owner, attempt, rev, state and the
 *   row's expiry (`_check_v2`'s `OK`); no row for every refusal, which the function then names.
 */
function fastStatements(schema: string, table: string, tag: string) {
  const qualified = `${schema}.${table}`
  const ms = (column: string) => `${qualified}_ms_v2(${column})`
  const clock = `SELECT date_trunc('milliseconds', clock_timestamp()) AS at, set_config('lock_timeout', '${FAST_LOCK_TIMEOUT}', true) AS lt`
  const millis = (n: string) => `${n} * interval '1 millisecond'`
  const matches = `(x.fp = $3 OR x.fp = ANY($10::text[]))`
  return {
    fastClaim: {
      name: `idemkit_fast_claim_${tag}`,
      text: `WITH c AS MATERIALIZED (${clock}),
        x AS MATERIALIZED (SELECT * FROM ${qualified} WHERE key = $1),
        ins AS (INSERT INTO ${qualified} AS t
          (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, replay_until, expires_at, resp, created_at, updated_at)
          SELECT $1, CASE WHEN $7::boolean THEN 'EXECUTING' ELSE 'CLAIMED' END, $2, 1, 1, $4, $3, $5, $6,
            c.at + ${millis('$8::bigint')}, NULL, c.at + ${millis('($8::bigint + $9::bigint)')}, NULL, c.at, c.at
          FROM c WHERE NOT EXISTS (SELECT 1 FROM x)
          ON CONFLICT (key) DO NOTHING
          RETURNING 'ACQUIRED ' || t.state || ' 1 1 ' || ${ms('t.lease_until')} AS r)
        SELECT r, NULL::bytea, NULL::text, NULL::text FROM ins
        UNION ALL
        SELECT CASE WHEN ${matches} THEN 'COMPLETED_REPLAY ' || ${ms('x.replay_until')} ELSE 'FINGERPRINT_MISMATCH' END,
          CASE WHEN ${matches} THEN x.resp END, CASE WHEN ${matches} THEN x.codec END, CASE WHEN ${matches} THEN x.policy END
        FROM x, c
        WHERE x.expires_at > c.at AND (x.state <> 'COMPLETED' OR x.replay_until > c.at)
          AND (x.state = 'COMPLETED' OR NOT ${matches})`,
    },
    fastComplete: {
      name: `idemkit_fast_complete_${tag}`,
      text: `UPDATE ${qualified} AS t SET state = 'COMPLETED', rev = t.rev + 1,
          replay_until = c.at + ${millis('$5::bigint')}, expires_at = c.at + ${millis('$5::bigint')}, resp = $6, updated_at = c.at
        FROM (${clock}) c
        WHERE t.key = $1 AND t.owner = $2 AND t.attempt = $3::bigint AND t.rev = $4::bigint AND t.state = 'EXECUTING'
          AND t.expires_at > c.at
        RETURNING 'OK ' || t.rev`,
    },
  }
}

/**
 * The statements of the operators' calls (read, scan, replace, delete) and of `describe()`.
 * A record's columns come in rows.ts `recordAt()`'s order, after the database's clock.
 */
function operatorStatements(schema: string, table: string, tag: string) {
  const qualified = `${schema}.${table}`
  const ms = (column: string) => `${qualified}_ms_${FUNCTIONS}(${column})`
  const clock = ms("date_trunc('milliseconds', clock_timestamp())")
  const record = (alias: string) =>
    [
      `${alias}state`,
      `${alias}owner`,
      `${alias}attempt`,
      `${alias}rev`,
      ms(`${alias}lease_until`),
      ms(`${alias}replay_until`),
      ms(`${alias}expires_at`),
      ms(`${alias}created_at`),
      ms(`${alias}updated_at`),
      `${alias}fp`,
      `${alias}codec`,
      `${alias}policy`,
      `${alias}op`,
      `${alias}resp`,
    ].join(', ')
  const at = (n: number) => `timestamptz 'epoch' + $${n}::bigint * interval '1 millisecond'`
  // The row as read (`recordMatch`): times compared as the functions store them (milliseconds).
  const same = `key = $1 AND state = $2 AND owner = $3 AND attempt = $4 AND rev = $5
    AND lease_until = ${at(6)} AND expires_at = ${at(7)} AND updated_at = ${at(8)}`
  return {
    read: {
      name: `idemkit_read_${tag}`,
      text: `SELECT ${clock}, ${record('r.')} FROM (SELECT 1) one LEFT JOIN ${qualified} r ON r.key = $1`,
    },
    scan: {
      name: `idemkit_scan_${tag}`,
      text: `SELECT ${clock}, key, ${record('')} FROM ${qualified}
        WHERE left(key, length($1)) = $1 AND key > $2 ORDER BY key LIMIT ${SCAN_PAGE}`,
    },
    replace: {
      name: `idemkit_replace_${tag}`,
      text: `WITH changed AS (UPDATE ${qualified} SET state = $9, owner = $10, attempt = $11, rev = $12,
        op = $13, fp = $14, codec = $15, policy = $16, lease_until = ${at(17)},
        replay_until = CASE WHEN $18::bigint = 0 THEN NULL ELSE ${at(18)} END, expires_at = ${at(19)},
        created_at = ${at(20)}, updated_at = ${at(21)}, resp = $22
        WHERE ${same} RETURNING 1) SELECT count(*)::int FROM changed`,
    },
    delete: {
      name: `idemkit_delete_${tag}`,
      text: `WITH gone AS (DELETE FROM ${qualified} WHERE ${same} RETURNING key),
        points AS (DELETE FROM ${qualified}_steps p WHERE p.key IN (SELECT g.key FROM gone g))
        SELECT count(*)::int FROM gone`,
    },
    describe: {
      name: `idemkit_describe_${tag}`,
      text: `SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('fsync'),
        (SELECT relpersistence::text FROM pg_class WHERE oid = to_regclass($1)), obj_description(to_regclass($1), 'pg_class')`,
    },
  }
}

/** A statement's call as a named prepared statement, rows as arrays. */
export function prepared(statement: Statement, values: unknown[]): PostgresQuery {
  return { name: statement.name, text: statement.text, values, rowMode: 'array' }
}

// The values of each call, in its function's order (sql/functions/2-operations.sql). Every call
// of a record has its key first; `lockTimeoutMs` is the function's own `lock_timeout`.

/** `<table>_claim_v4`. */
export function claimValues(request: ClaimRequest, lockTimeoutMs: number): unknown[] {
  return [
    request.key,
    request.owner,
    request.fingerprint,
    request.operation,
    request.codec,
    request.policy,
    request.start,
    request.expiredExecution,
    request.leaseMs,
    request.failureRetentionMs,
    request.legacyFingerprints ?? [],
    lockTimeoutMs,
  ]
}

/** `fastClaim`: the claim's values that statement reads. */
export function fastClaimValues(request: ClaimRequest): unknown[] {
  const { key, owner, fingerprint, operation, codec, policy, start, leaseMs, failureRetentionMs } = request
  return [
    key,
    owner,
    fingerprint,
    operation,
    codec,
    policy,
    start,
    leaseMs,
    failureRetentionMs,
    request.legacyFingerprints ?? [],
  ]
}

/** `fastComplete`: `completeValues` without the function's `lock_timeout`. */
export function fastCompleteValues(ref: OwnerRef, response: Uint8Array, times: RecordTimes): unknown[] {
  return [ref.key, ref.owner, ref.attempt, ref.rev, times.replayWindowMs, asBuffer(response)]
}

/** `<table>_step_v1`: the step's recovery point, fenced by the owner's attempt. */
export function stepValues(ref: OwnerRef, name: string, result: string | null, lockTimeoutMs: number): unknown[] {
  return [ref.key, ref.owner, ref.attempt, name, result, lockTimeoutMs]
}

/** `<table>_start_v2`. */
export function startValues(ref: OwnerRef, times: RecordTimes, lockTimeoutMs: number): unknown[] {
  return [ref.key, ref.owner, ref.attempt, ref.rev, times.leaseMs, times.failureRetentionMs, lockTimeoutMs]
}

/** `<table>_complete_v3`, on its own or in a run's transaction. */
export function completeValues(
  ref: OwnerRef,
  response: Uint8Array,
  times: RecordTimes,
  lockTimeoutMs: number,
): unknown[] {
  return [ref.key, ref.owner, ref.attempt, ref.rev, times.replayWindowMs, asBuffer(response), lockTimeoutMs]
}

/** A response as pg sends a binary parameter: a Buffer of the bytes as they are. */
function asBuffer(response: Uint8Array): Buffer {
  return Buffer.isBuffer(response) ? response : Buffer.from(response.buffer, response.byteOffset, response.byteLength)
}

/** `<table>_mark_failed_v3`: the cause in `resp` (sql/006-failure-cause.sql). */
export function markFailedValues(
  ref: OwnerRef,
  kind: FailureKind,
  times: RecordTimes,
  lockTimeoutMs: number,
  cause: FailureCause | undefined,
): unknown[] {
  const retryable = kind === FailureKind.RETRYABLE
  const kept = cause === undefined ? null : encodeCause(cause)
  return [ref.key, ref.owner, ref.attempt, ref.rev, retryable, times.failureRetentionMs, lockTimeoutMs, kept]
}

/** `<table>_release_v2`. */
export function releaseValues(ref: OwnerRef, lockTimeoutMs: number): unknown[] {
  return [ref.key, ref.owner, ref.attempt, ref.rev, lockTimeoutMs]
}

/**
 * `<table>_renew_v2`. `inTransaction`: the run has a transaction of this store's open, so its
 * lease moves in the leases table (sql/002-functions.sql).
 */
export function renewValues(
  ref: OwnerRef,
  times: RecordTimes,
  lockTimeoutMs: number,
  inTransaction: boolean,
): unknown[] {
  return [ref.key, ref.owner, ref.attempt, times.leaseMs, times.failureRetentionMs, lockTimeoutMs, inTransaction]
}

/** The first values of `replace` and `delete`: the row as the operator read it. */
function recordMatch(key: string, expected: RecordView): unknown[] {
  const { state, owner, attempt, rev, leaseUntil, expiresAt, updatedAt } = expected
  return [key, state, owner, attempt, rev, leaseUntil, expiresAt, updatedAt]
}

/** `delete` when `next` is undefined, else `replace`: the row as read, then the row to write. */
export function replaceValues(key: string, expected: RecordView, next: RecordView | undefined): unknown[] {
  if (next === undefined) return recordMatch(key, expected)
  return [
    ...recordMatch(key, expected),
    next.state,
    next.owner,
    next.attempt,
    next.rev,
    next.op,
    next.fp,
    next.codec,
    next.policy,
    next.leaseUntil,
    next.replayUntil,
    next.expiresAt,
    next.createdAt,
    next.updatedAt,
    next.state === 'COMPLETED' ? next.response : (causeBytes(next) ?? null),
  ]
}

/**
 * The signed 64-bit advisory lock key for `purpose` (`sweep`, `migrate`) on one table, as text:
 * the sweeper of every instance takes the same one.
 */
export function lockKey(purpose: 'sweep' | 'migrate', schema: string, table: string): string {
  return createHash('sha256').update(`idemkit:${purpose}:${schema}.${table}`).digest().readBigInt64BE(0).toString()
}
