/**
 * The PostgreSQL store (docs/design.md §6): one row per scope in one table, every operation one call of a
 * PL/pgSQL function (sql/002-functions.sql, their bodies from sql/003-holder.sql; the claim and the completion
 * from sql/004-fast-paths.sql), the twin of its Lua script, sent as a named prepared
 * statement: one round trip per operation. The store takes the application's `pg.Pool` and
 * never ends it; `pg` itself is never imported here (the pool is all it needs), so the package
 * has no runtime dependency on it.
 */

import { createHash } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { publishStoreEvent } from '../../core/channels.js'
import {
  ErrorCode,
  IdempotencyError,
  integerOption,
  invalidOption,
  StoreIndeterminateError,
  StoreProtocolError,
  StoreUnavailableError,
} from '../../core/errors.js'
import {
  ClaimReply,
  FailureKind,
  InspectReply,
  RecordState,
  RecoveryReason,
  TransitionReply,
} from '../../core/record.js'
import type {
  ClaimRequest,
  ClaimResult,
  HeldRecord,
  InspectResult,
  OwnerRef,
  ReadResult,
  RecordTimes,
  RecordView,
  RenewResult,
  ScannedRecord,
  StoreReport,
  TransactionalStore,
  TransactionClient,
  TransitionResult,
} from '../../core/store.js'
import { checkKey } from '../../core/store-args.js'
import { checkKeyPrefix, checkOptionNames, StoreFront, TransactionFront } from '../../core/store-front.js'

/** A query as the store sends it: a named prepared statement, rows as arrays. */
export interface PostgresQuery {
  readonly name: string
  readonly text: string
  readonly values: unknown[]
  readonly rowMode: 'array'
}

/** What the store uses of a checked-out `pg.PoolClient`. */
export interface PostgresClient {
  query(query: PostgresQuery): Promise<{ rows: unknown[][] }>
  query(text: string): Promise<unknown>
  /** node-postgres 8.11+: 'I' idle, 'T' in a transaction, 'E' in a failed transaction. */
  getTransactionStatus?(): string | null
  /** Back to the pool; with an error, the pool destroys the connection instead. */
  release(error?: Error | boolean): void
  /** The server session's process ID (node-postgres: from BackendKeyData). */
  readonly processID?: number | null
  /** The store listens for `'error'` while it holds the connection (node-postgres emits one when the socket dies). */
  on(event: 'error', listener: (error: Error) => void): unknown
  removeListener(event: 'error', listener: (error: Error) => void): unknown
}

/** What the store uses of a `pg.Pool` (node-postgres): `connect()`. */
export interface PostgresPool {
  connect(): Promise<PostgresClient>
}

/** What the store reports through `onEvent`. */
export type PostgresStoreEvent =
  | {
      /** A sweep failed; reported once until a sweep succeeds again. */
      readonly type: 'sweep-failed'
      readonly message: string
      readonly error: unknown
    }
  | {
      /** A sweep removed expired rows. */
      readonly type: 'swept'
      readonly message: string
      readonly deleted: number
    }
  | {
      /**
       * A round of the sweeper ran `sweepBudgetMs` and expired rows remain: the table grows
       * faster than one round per `sweepIntervalMs` clears it. The next round starts at once.
       * Reported once, until a round ends with none left.
       */
      readonly type: 'sweep-behind'
      readonly message: string
      /** Rows the round deleted. */
      readonly deleted: number
      /** How long the round ran. */
      readonly elapsedMs: number
    }
  | {
      /**
       * `migrate()` had to change the schema and waited `lockTimeoutMs` for a lock; it rolled
       * back and tries again. The message names the sessions holding the lock.
       */
      readonly type: 'migrate-waiting'
      readonly message: string
      /** The try that timed out, from 1. */
      readonly attempt: number
    }

/** Options of `postgresStore()`. */
export interface PostgresStoreOptions {
  /**
   * The application's `pg.Pool`. The store checks out a connection per call and never ends the
   * pool. Give the pool an `'error'` listener (node-postgres emits one when an idle connection
   * dies, e.g. on a server restart; without a listener the process exits) and, ideally, a
   * `statement_timeout` a little above `statementTimeoutMs`, so the server also stops a
   * statement the store stopped waiting for.
   */
  readonly pool: PostgresPool
  /**
   * The table's name; the functions are named after it and the schema version that added them (`<table>_claim_v3`, `<table>_inspect_v2`, ...). Lowercase
   * letters, digits and `_`, starting with a letter or `_`, at most 40 characters.
   * @default 'idemkit_records'
   */
  readonly table?: string
  /**
   * The schema of the table and its functions (same characters as `table`). `migrate()`
   * creates it when it is not `public` and does not exist.
   * @default 'public'
   */
  readonly schema?: string
  /**
   * First segment of every key (`<keyPrefix>:idem:...`): non-empty, no whitespace.
   * @default 'idemkit'
   */
  readonly keyPrefix?: string
  /**
   * How long a call waits for a row another session holds locked (the function's own
   * `lock_timeout`). A call that waits longer is cancelled by the server and rolled back:
   * `StoreUnavailableError` (HTTP 503), nothing applied.
   * @default 2000
   */
  readonly lockTimeoutMs?: number
  /**
   * How many times `migrate()`, when it must change the schema, tries to get its locks (each
   * waiting at most `lockTimeoutMs`, with a growing pause between tries) before it gives up.
   * @default 5
   */
  readonly migrateAttempts?: number
  /**
   * `transaction: true`: the run's transaction's `lock_timeout`, how long the action's own
   * statements wait for a row lock (a stale owner's, say) before they fail (55P03: the action
   * throws, the transaction rolls back, the answer is 503 and a retry may run it).
   * @default the route's lease (`leaseMs`)
   */
  readonly transactionLockTimeoutMs?: number
  /**
   * `transaction: true`: the run's transaction's `idle_in_transaction_session_timeout`. Every
   * lease renewal of a live run (a third of the lease) also sends its session a statement that
   * reads nothing, so only a stalled run (a paused or partitioned instance) sits idle this long;
   * the server then ends its session: its locks go, nothing of it commits, its client gets 503.
   * Keep it at most the lease, so a new owner, which takes over only after a lease, never
   * waits much longer than that for a stale owner's locks.
   * @default the route's lease (`leaseMs`)
   */
  readonly transactionIdleTimeoutMs?: number
  /**
   * How long the store waits for a reply once the statement is sent. A call still unanswered
   * then is indeterminate (`StoreIndeterminateError`: the executor inspects the record) and its
   * connection is destroyed. Must exceed `lockTimeoutMs`.
   * @default 5000
   */
  readonly statementTimeoutMs?: number
  /**
   * How long a call waits for a connection from the pool (whatever the pool's own
   * `connectionTimeoutMillis`). No connection by then: `StoreUnavailableError`, nothing sent.
   * @default 2000
   */
  readonly acquireTimeoutMs?: number
  /**
   * How often expired rows are deleted (`0`: never; call `sweep()` yourself, e.g. from a cron
   * job). Claim and inspect treat an expired row as absent whether it was swept or not; the
   * sweeper only gives the space back. Across instances, one sweeps at a time (an advisory
   * lock); the others skip that round.
   * @default 60000
   */
  readonly sweepIntervalMs?: number
  /**
   * Rows deleted per sweep statement (one short transaction each); a round runs statements
   * until one deletes fewer or `sweepBudgetMs` has passed.
   * @default 1000
   */
  readonly sweepBatch?: number
  /**
   * How long one round of the sweeper may run. A round that ends on it with expired rows left
   * reports `sweep-behind`, and the next round starts after a short pause (100 ms) instead of
   * `sweepIntervalMs`, until the sweeper has caught up.
   * @default 2000
   */
  readonly sweepBudgetMs?: number
  /**
   * Receives `sweep-failed` (once until a sweep succeeds again), `sweep-behind` (once until
   * the sweeper caught up), `swept` (rows were deleted) and `migrate-waiting`. Must not throw.
   * @default a Node.js process warning for `sweep-failed` and `sweep-behind`; the others are dropped
   */
  readonly onEvent?: (event: PostgresStoreEvent) => void
}

const DEFAULTS = {
  table: 'idemkit_records',
  schema: 'public',
  keyPrefix: 'idemkit',
  lockTimeoutMs: 2_000,
  statementTimeoutMs: 5_000,
  acquireTimeoutMs: 2_000,
  sweepIntervalMs: 60_000,
  sweepBatch: 1_000,
  sweepBudgetMs: 2_000,
  migrateAttempts: 5,
} as const
const KNOWN_OPTIONS: readonly string[] = [
  'pool',
  'table',
  'schema',
  'keyPrefix',
  'lockTimeoutMs',
  'migrateAttempts',
  'transactionLockTimeoutMs',
  'transactionIdleTimeoutMs',
  'statementTimeoutMs',
  'acquireTimeoutMs',
  'sweepIntervalMs',
  'sweepBatch',
  'sweepBudgetMs',
  'onEvent',
]
/** Names the SQL can use unquoted: no quoting, no case folding, room for the functions' suffixes. */
const IDENTIFIER = /^[a-z_][a-z0-9_]{0,39}$/
/** The pause before the next round of a sweeper that is behind. */
const SWEEP_CATCH_UP_PAUSE_MS = 100

/** The migrations, `sql/<NNN>-<name>.sql` next to this module (copied next to the compiled module by the build). */
const SQL_DIR = fileURLToPath(new URL('./sql/', import.meta.url))
/** The schema's version: the number of the last migration file. */
export const POSTGRES_SCHEMA_VERSION = 4
/**
 * The suffix of the functions the store calls (`<table>_inspect_v2`): the schema version that added
 * them. Schema 3 replaced their bodies only, with the same behaviour, so an instance of either
 * version calls the same functions.
 */
const FUNCTIONS = 'v2'
/**
 * The suffix of the claim and the completion of schema 4 (`<table>_claim_v3`, `_complete_v3`,
 * sql/004-fast-paths.sql), which answer in fewer columns; schema 2's stay for the instances of
 * schema 3 during a rolling deploy.
 */
const FAST_FUNCTIONS = 'v3'

/** The numbered migration files in order: `{ version, file }`. */
export function migrationFiles(): readonly { readonly version: number; readonly file: string }[] {
  return readdirSync(SQL_DIR)
    .filter((name) => /^\d{3}-[a-z0-9-]+\.sql$/.test(name))
    .sort()
    .map((name) => ({ version: Number(name.slice(0, 3)), file: join(SQL_DIR, name) }))
}

/**
 * The SQL of the migrations after schema version `from` (all of them by default), in order, for
 * one schema and table: what `migrate()` applies, for teams that run migrations themselves.
 */
export function migrationSql(schema: string, table: string, from = 0): string {
  return migrationFiles()
    .filter((migration) => migration.version > from)
    .map((migration) => readFileSync(migration.file, 'utf8'))
    .join('\n')
    .replaceAll('{{schema}}', schema)
    .replaceAll('{{table}}', table)
}

/**
 * The signed 64-bit advisory lock key for `purpose` (`sweep`, `migrate`) on one table, as text:
 * the sweeper of every instance takes the same one.
 */
export function lockKey(purpose: 'sweep' | 'migrate', schema: string, table: string): string {
  return createHash('sha256').update(`idemkit:${purpose}:${schema}.${table}`).digest().readBigInt64BE(0).toString()
}

/** pg's messages for a query refused before anything was written to the socket. */
const NOT_SENT_MESSAGES: readonly string[] = [
  'Client has encountered a connection error and is not queryable',
  'Client was closed and is not queryable',
]
/** SQLSTATEs that mean the table or its functions are not there (or not this version). */
const NOT_MIGRATED: ReadonlySet<string> = new Set(['42883', '42P01', '3F000', '42703', '42P13'])

/**
 * Turns an error from a store call into this library's fault errors (docs/design.md §4 "Lost replies").
 * The original error is kept as `cause`; messages never carry the call's values.
 *
 * - `StoreUnavailableError` (certainly not applied): the pool gave no connection (refused,
 *   authentication, the server starting or shutting down, `acquireTimeoutMs`); pg refused the
 *   query before writing it; or the server answered with an ERROR (SQLSTATE of any class:
 *   `lock_timeout` 55P03, a cancelled statement 57014, a serialization failure 40001, a
 *   function that is missing because `migrate()` never ran): every call is one statement
 *   outside any transaction of the caller's, so an ERROR means its transaction rolled back.
 * - `StoreIndeterminateError` (may have been applied): everything after sending that is not an
 *   ERROR reply: the connection lost (ECONNRESET, "Connection terminated unexpectedly"), a FATAL
 *   such as 57P01 from `pg_terminate_backend` (it can arrive after the commit), no reply within
 *   `statementTimeoutMs`.
 * @param error what the pool or the query rejected with.
 * @param sent false while the connection was being acquired (nothing sent yet).
 */
export function postgresFault(error: unknown, sent: boolean): IdempotencyError {
  if (error instanceof IdempotencyError) return error
  const message = error instanceof Error ? error.message : String(error)
  const options = { cause: error }
  if (!sent || NOT_SENT_MESSAGES.includes(message)) {
    return new StoreUnavailableError(
      `The PostgreSQL store could not send the call (${message}); it was not applied.`,
      options,
    )
  }
  const fields = error as { severity?: unknown; code?: unknown }
  if (fields.severity === 'ERROR' && typeof fields.code === 'string') {
    if (NOT_MIGRATED.has(fields.code)) {
      return new StoreUnavailableError(
        `The PostgreSQL store's table or functions are missing or out of date (SQLSTATE ${fields.code}: ${message}); ` +
          'run store.migrate(). The call was not applied.',
        options,
      )
    }
    return new StoreUnavailableError(
      `PostgreSQL refused the call (SQLSTATE ${fields.code}: ${message}); it was rolled back, not applied.`,
      options,
    )
  }
  return new StoreIndeterminateError(
    `The PostgreSQL store call may or may not have been applied (${message}); inspect the record to find out.`,
    options,
  )
}

/** The schema version in a `[comment, exists]` row of the catalog: 0 when the table is not there. */
function versionOf(row: readonly unknown[] | undefined): number {
  if (row?.[1] !== true) return 0
  const match = /^idemkit records, schema (\d+)$/.exec(String(row[0]))
  // A table of the store's without a comment of its own was made by hand: schema 1's layout.
  return match === null ? 1 : Number(match[1])
}

/** One function's prepared statement. */
interface Statement {
  readonly name: string
  readonly text: string
}

/** The columns each function answers with, in order (its OUT parameters). */
const COLUMNS = {
  claim: 'r, resp, codec, policy',
  complete: 'r',
  inspect: 'kind, mine, attempt, rev, fp, op, lease_until, lease_left_ms, resp, codec, policy, replay_until',
  transition: 'kind, rev, state',
  renew: 'kind, lease_until, state',
} as const

function statements(schema: string, table: string) {
  const tag = createHash('sha256').update(`${POSTGRES_SCHEMA_VERSION}:${schema}.${table}`).digest('hex').slice(0, 12)
  const fn = (name: string, params: number, columns: string, suffix: string = FUNCTIONS): Statement => ({
    name: `idemkit_${name}_${tag}`,
    text: `SELECT ${columns} FROM ${schema}.${table}_${name}_${suffix}(${Array.from({ length: params }, (_, i) => `$${i + 1}`).join(', ')})`,
  })
  return {
    tag,
    claim: fn('claim', 12, COLUMNS.claim, FAST_FUNCTIONS),
    inspect: fn('inspect', 2, COLUMNS.inspect),
    start: fn('start', 7, COLUMNS.transition),
    complete: fn('complete', 7, COLUMNS.complete, FAST_FUNCTIONS),
    markFailed: fn('mark_failed', 7, COLUMNS.transition),
    release: fn('release', 5, COLUMNS.transition),
    renew: fn('renew', 7, COLUMNS.renew),
    sweep: {
      name: `idemkit_sweep_${tag}`,
      text: `SELECT ${schema}.${table}_sweep_${FUNCTIONS}($1, $2)`,
    },
    ...operatorStatements(schema, table, tag),
  }
}

/**
 * The statements of the operators' calls (read, scan, replace, delete) and of `describe()`.
 * A record's columns come in `recordAt()`'s order, after the database's clock.
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
  // The row as read: times compared as the functions store them (milliseconds).
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
      text: `WITH gone AS (DELETE FROM ${qualified} WHERE ${same} RETURNING 1) SELECT count(*)::int FROM gone`,
    },
    describe: {
      name: `idemkit_describe_${tag}`,
      text: `SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('fsync'),
        (SELECT relpersistence::text FROM pg_class WHERE oid = to_regclass($1)), obj_description(to_regclass($1), 'pg_class')`,
    },
  }
}

/** SQLSTATEs of a transaction rolled back to be tried again: serialization failure, deadlock. */
const SERIALIZATION_FAILURES: ReadonlySet<unknown> = new Set(['40001', '40P01'])
/** Sends of one store call at most when each one fails with a serialization failure. */
const SERIALIZATION_TRIES = 5

/** Rows per scan statement. */
const SCAN_PAGE = 500

/** The record in a row of `read` or `scan`, its 14 columns from `at` on. */
function recordAt(fn: string, row: readonly unknown[], at: number): RecordView {
  return {
    state: state(fn, row, at),
    owner: text(fn, row, at + 1),
    attempt: integer(fn, row, at + 2, 1),
    rev: integer(fn, row, at + 3, 1),
    leaseUntil: integer(fn, row, at + 4, 0),
    replayUntil: row[at + 5] === null ? 0 : integer(fn, row, at + 5, 0),
    expiresAt: integer(fn, row, at + 6, 0),
    createdAt: integer(fn, row, at + 7, 0),
    updatedAt: integer(fn, row, at + 8, 0),
    fp: text(fn, row, at + 9),
    codec: text(fn, row, at + 10),
    policy: text(fn, row, at + 11),
    op: text(fn, row, at + 12),
    response: row[at + 13] === null ? Buffer.alloc(0) : bytes(fn, row, at + 13),
  }
}

const RECORD_STATES: ReadonlySet<unknown> = new Set(Object.values(RecordState))

function protocolError(fn: string, problem: string): StoreProtocolError {
  return new StoreProtocolError(`The PostgreSQL function ${fn} answered in an unexpected shape: ${problem}.`)
}

/** An int8 column (pg hands them over as text), or a field of a packed answer, as an exact integer of at least `min`. */
function integer(fn: string, row: readonly unknown[], index: number, min: number): number {
  const value = Number(row[index])
  if (row[index] === null || row[index] === '' || !Number.isSafeInteger(value) || value < min) {
    throw protocolError(fn, `column ${index} is not an integer >= ${min}`)
  }
  return value
}

function text(fn: string, row: readonly unknown[], index: number): string {
  const value = row[index]
  if (typeof value !== 'string' || value.length === 0)
    throw protocolError(fn, `column ${index} is not a non-empty text`)
  return value
}

function bytes(fn: string, row: readonly unknown[], index: number): Buffer {
  const value = row[index]
  if (!Buffer.isBuffer(value)) throw protocolError(fn, `column ${index} is not bytea`)
  return value
}

function state(fn: string, row: readonly unknown[], index: number): RecordState {
  const value = row[index]
  if (!RECORD_STATES.has(value)) throw protocolError(fn, `column ${index} is not a record state`)
  return value as RecordState
}

function held(fn: string, row: readonly unknown[]): HeldRecord {
  const s = state(fn, row, 0)
  if (s !== RecordState.CLAIMED && s !== RecordState.EXECUTING)
    throw protocolError(fn, 'a held record is not CLAIMED or EXECUTING')
  return { state: s, attempt: integer(fn, row, 1, 1), rev: integer(fn, row, 2, 1), leaseUntil: integer(fn, row, 3, 1) }
}

/** The fields of a packed answer (`<outcome> <field> ...`, sql/004-fast-paths.sql): the outcome, then the rest. */
function unpack(fn: string, row: readonly unknown[]): [unknown, string[]] {
  const packed = row[0]
  if (typeof packed !== 'string') throw protocolError(fn, 'column 0 is not a text')
  const [kind, ...fields] = packed.split(' ')
  return [kind, fields]
}

/** The claim's answer: `r` packed (the outcome and its numbers), then resp, codec, policy (sql/004-fast-paths.sql). */
function decodeClaim(row: readonly unknown[]): ClaimResult {
  const [kind, fields] = unpack('claim', row)
  switch (kind) {
    case ClaimReply.ACQUIRED:
    case ClaimReply.TAKEN_OVER:
    case ClaimReply.REPLAYED_ACQUIRE:
      return { kind, ...held('claim', fields) }
    case ClaimReply.COMPLETED_REPLAY:
      return {
        kind,
        response: bytes('claim', row, 1),
        codec: text('claim', row, 2),
        policy: text('claim', row, 3),
        replayUntil: integer('claim', fields, 0, 1),
      }
    case ClaimReply.FINGERPRINT_MISMATCH:
      return { kind }
    case ClaimReply.RECOVERY_REQUIRED: {
      const reason = fields[0]
      if (reason !== RecoveryReason.ABANDONED && reason !== RecoveryReason.EXPIRED_EXECUTION) {
        throw protocolError('claim', 'the answer has no recovery reason')
      }
      return { kind, reason }
    }
    case ClaimReply.IN_PROGRESS:
      return { kind, retryAfterMs: integer('claim', fields, 0, 1) }
    default:
      throw protocolError('claim', 'column 0 is not a claim outcome')
  }
}

/** The completion's answer, packed in one text (sql/004-fast-paths.sql): as a transition's. */
function decodeComplete(row: readonly unknown[]): TransitionResult {
  const [kind, fields] = unpack('complete', row)
  return decodeTransition('complete', [kind, fields[0] ?? null, fields[0] ?? null])
}

function decodeInspect(row: readonly unknown[]): InspectResult {
  const kind = row[0]
  if (kind === InspectReply.ABSENT) return { kind }
  if (typeof row[1] !== 'boolean') throw protocolError('inspect', 'column 1 (mine) is not a boolean')
  const seen = {
    mine: row[1],
    attempt: integer('inspect', row, 2, 1),
    rev: integer('inspect', row, 3, 1),
    fingerprint: text('inspect', row, 4),
    operation: text('inspect', row, 5),
  }
  switch (kind) {
    case InspectReply.CLAIMED:
    case InspectReply.EXECUTING:
      return {
        kind,
        ...seen,
        leaseUntil: integer('inspect', row, 6, 1),
        leaseRemainingMs: integer('inspect', row, 7, 0),
      }
    case InspectReply.COMPLETED:
      return {
        kind,
        ...seen,
        response: bytes('inspect', row, 8),
        codec: text('inspect', row, 9),
        policy: text('inspect', row, 10),
        replayUntil: integer('inspect', row, 11, 1),
      }
    case InspectReply.FAILED_RETRYABLE:
    case InspectReply.ABANDONED:
      return { kind, ...seen }
    default:
      throw protocolError('inspect', 'column 0 is not a record state or ABSENT')
  }
}

function decodeTransition(fn: string, row: readonly unknown[]): TransitionResult {
  const kind = row[0]
  switch (kind) {
    case TransitionReply.OK:
      // release answers rev 0 (the row is gone); the others the new rev, at least 2.
      return { kind, rev: integer(fn, row, 1, 0) }
    case TransitionReply.ALREADY:
      return { kind, rev: integer(fn, row, 1, 2) }
    case TransitionReply.NOT_FOUND:
    case TransitionReply.NOT_OWNER:
      return { kind }
    case TransitionReply.WRONG_STATE:
      return { kind, state: state(fn, row, 2) }
    default:
      throw protocolError(fn, 'column 0 is not a transition outcome')
  }
}

function decodeRenew(row: readonly unknown[]): RenewResult {
  const kind = row[0]
  switch (kind) {
    case TransitionReply.OK:
      return { kind, leaseUntil: integer('renew', row, 1, 1) }
    case TransitionReply.NOT_FOUND:
    case TransitionReply.NOT_OWNER:
      return { kind }
    case TransitionReply.WRONG_STATE:
      return { kind, state: state('renew', row, 2) }
    default:
      throw protocolError('renew', 'column 0 is not a renew outcome')
  }
}

function checkMs(name: string, value: unknown, min: number): number {
  return integerOption(name, value, min, 2_147_483_647, 'milliseconds')
}

function ignore(): void {}

/** A function's call as a named prepared statement, rows as arrays. */
function prepared(statement: Statement, values: unknown[]): PostgresQuery {
  return { name: statement.name, text: statement.text, values, rowMode: 'array' }
}

/** The one row a function answers with. */
function oneRow(name: string, result: { rows: unknown[][] }): unknown[] {
  const row = result.rows[0]
  if (result.rows.length !== 1 || !Array.isArray(row)) {
    throw protocolError(name, `${result.rows.length} rows instead of one`)
  }
  return row
}

/**
 * What to hand `release()` after a call failed: nothing when the server answered with an ERROR
 * (the connection is usable), else the error, so the pool destroys a connection that may be
 * mid-reply.
 */
function brokenBy(error: unknown): Error | undefined {
  if ((error as { severity?: unknown }).severity === 'ERROR') return undefined
  return error instanceof Error ? error : new Error(String(error))
}

/**
 * Sends `query` on `client` and waits at most `timeoutMs` for the reply; then rejects with
 * StoreIndeterminateError (the statement may still run: the caller destroys the connection).
 */
function timedQuery(
  client: PostgresClient,
  query: PostgresQuery | string,
  timeoutMs: number,
): Promise<{ rows: unknown[][]; command?: string }> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(
        new StoreIndeterminateError(
          `PostgreSQL did not answer within ${timeoutMs} ms (statementTimeoutMs); ` +
            'the call may or may not have been applied: inspect the record to find out.',
        ),
      )
    }, timeoutMs)
    let sent: Promise<{ rows: unknown[][]; command?: string }>
    try {
      sent = (typeof query === 'string' ? client.query(query) : client.query(query)) as Promise<{
        rows: unknown[][]
        command?: string
      }>
    } catch (error) {
      clearTimeout(timer)
      reject(error)
      return
    }
    sent.then(
      (result) => {
        clearTimeout(timer)
        resolve(result)
      },
      (error: unknown) => {
        clearTimeout(timer)
        reject(error)
      },
    )
  })
}

/**
 * One run's transaction on the PostgreSQL store (`beginTransaction()`). The action writes
 * through `db`; `commit()` runs the complete function in the same transaction, then COMMIT, so
 * the action's writes and the record's completion are committed together or not at all.
 *
 * The lease is renewed meanwhile on other connections of the pool. The renewal locks only the
 * record's row, and this transaction locks that row only in `commit()`, right before COMMIT:
 * a renewal waits at most for that COMMIT, and this transaction never waits for anything a
 * renewal holds, so the two cannot deadlock.
 */
export class PostgresTransaction extends TransactionFront {
  readonly db: TransactionClient
  readonly #client: PostgresClient
  readonly #complete: Statement
  readonly #lockTimeoutMs: number
  readonly #statementTimeoutMs: number
  readonly #onEnd: () => void
  #ended = false

  constructor(
    client: PostgresClient,
    complete: Statement,
    lockTimeoutMs: number,
    statementTimeoutMs: number,
    onEnd: () => void = () => undefined,
  ) {
    super()
    this.#onEnd = onEnd
    this.#client = client
    this.db = client as unknown as TransactionClient
    this.#complete = complete
    this.#lockTimeoutMs = lockTimeoutMs
    this.#statementTimeoutMs = statementTimeoutMs
  }

  protected async doCommit(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult> {
    this.#end()
    const client = this.#client
    let broken: Error | undefined
    let committing = false
    try {
      if (client.getTransactionStatus?.() === 'I') {
        throw new IdempotencyError(
          ErrorCode.TRANSACTION_ENDED,
          'The action ended its transaction itself (COMMIT or ROLLBACK on idempotency.db): ' +
            'its writes may have been committed without the record.',
        )
      }
      const bytes = Buffer.isBuffer(response)
        ? response
        : Buffer.from(response.buffer, response.byteOffset, response.byteLength)
      const values = [ref.key, ref.owner, ref.attempt, ref.rev, times.replayWindowMs, bytes, this.#lockTimeoutMs]
      const reply = await timedQuery(client, prepared(this.#complete, values), this.#statementTimeoutMs)
      const result = decodeComplete(oneRow(this.#complete.name, reply))
      if (result.kind !== TransitionReply.OK) {
        // Not this run's record any more: nothing of the action's writes is kept.
        if (!(await this.#rollbackQuietly())) broken = new Error('ROLLBACK failed')
        return result
      }
      committing = true
      const done = await timedQuery(client, 'COMMIT', this.#statementTimeoutMs)
      // COMMIT of a transaction an earlier error aborted answers ROLLBACK, not an error.
      if (done.command !== undefined && done.command !== 'COMMIT') {
        throw new StoreUnavailableError(`PostgreSQL answered ${done.command} to COMMIT: the transaction rolled back.`)
      }
      return result
    } catch (error) {
      broken = brokenBy(error)
      if (committing) {
        // COMMIT was sent: an ERROR (or a ROLLBACK answer) means it rolled back; a reply lost
        // or given up on means it may have committed.
        throw error instanceof StoreUnavailableError ? error : postgresFault(error, true)
      }
      // Before COMMIT nothing can have committed: roll back (a connection lost or given up on
      // is destroyed instead, and the server rolls the transaction back).
      if (broken === undefined && !(await this.#rollbackQuietly())) broken = new Error('ROLLBACK failed')
      if (error instanceof IdempotencyError && error.code === ErrorCode.TRANSACTION_ENDED) throw error
      const message = error instanceof Error ? error.message : String(error)
      throw new StoreUnavailableError(`The transaction did not commit (${message}); nothing of it was applied.`, {
        cause: error,
      })
    } finally {
      client.release(broken)
      client.removeListener('error', ignore)
    }
  }

  /**
   * Tells the server the run is alive: a statement that neither reads nor writes (`SHOW`, no
   * snapshot, so the action may still set its isolation level) on the transaction's
   * connection, queued behind the action's own statements. The store sends it with every
   * renewal, so a live run's session is never idle for long and only a stalled one meets
   * `idle_in_transaction_session_timeout`. Its answer, or error, is of no interest.
   */
  touch(): void {
    if (this.#ended) return
    try {
      this.#client.query('SHOW lock_timeout').catch(ignore)
    } catch {
      // A connection that cannot take it has failed the action's statements already.
    }
  }

  async rollback(): Promise<void> {
    if (this.#ended) return
    this.#ended = true
    this.#onEnd()
    const ok = await this.#rollbackQuietly()
    this.#client.release(ok ? undefined : new Error('ROLLBACK failed'))
    this.#client.removeListener('error', ignore)
  }

  #end(): void {
    if (this.#ended) throw new Error('A transaction is committed or rolled back once.')
    this.#ended = true
    this.#onEnd()
  }

  /** ROLLBACK; false when it failed (the connection is then destroyed, which rolls back too). */
  async #rollbackQuietly(): Promise<boolean> {
    try {
      await timedQuery(this.#client, 'ROLLBACK', this.#statementTimeoutMs)
      return true
    } catch {
      return false
    }
  }
}

/** The default `onEvent`: a process warning for a failed sweep or a sweeper falling behind. */
function emitProcessWarning(event: PostgresStoreEvent): void {
  if (event.type === 'sweep-failed') {
    process.emitWarning(event.message, { type: 'IdempotencyWarning', code: 'IDEMKIT_POSTGRES_SWEEP_FAILED' })
  } else if (event.type === 'sweep-behind') {
    process.emitWarning(event.message, { type: 'IdempotencyWarning', code: 'IDEMKIT_POSTGRES_SWEEP_BEHIND' })
  }
}

/** The PostgreSQL store. Create it with `postgresStore()`. */
export class PostgresStore extends StoreFront implements TransactionalStore {
  readonly name = 'postgres'
  readonly keyPrefix: string
  /** The table's qualified name, `<schema>.<table>`. */
  readonly table: string
  readonly #pool: PostgresPool
  readonly #schemaName: string
  readonly #tableName: string
  readonly #lockTimeoutMs: number
  readonly #statementTimeoutMs: number
  readonly #acquireTimeoutMs: number
  readonly #migrateAttempts: number
  readonly #transactionLockTimeoutMs: number | undefined
  readonly #transactionIdleTimeoutMs: number | undefined
  readonly #sweepBatch: number
  readonly #sweepIntervalMs: number
  readonly #sweepBudgetMs: number
  readonly #onEvent: (event: PostgresStoreEvent) => void
  readonly #sql: ReturnType<typeof statements>
  readonly #sweepLock: string
  /** Records whose last call got no reply and whose session could not be ended yet: key to its PID. */
  readonly #undecided = new Map<string, number>()
  /** The runs with a transaction open (`beginTransaction(run)`): key to attempt. */
  readonly #inTransaction = new Map<string, { readonly attempt: number; readonly transaction: PostgresTransaction }>()
  #sweeper: NodeJS.Timeout | undefined
  #sweepFailed = false
  /** The last round ended with expired rows left (`sweep-behind` reported). */
  #sweepBehind = false
  #closed = false

  /**
   * @param options see `PostgresStoreOptions`.
   * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for a missing pool, an unknown option or
   *   a value out of range.
   */
  constructor(options: PostgresStoreOptions) {
    super()
    checkOptionNames(options, KNOWN_OPTIONS, 'postgresStore options')
    const {
      pool,
      table = DEFAULTS.table,
      schema = DEFAULTS.schema,
      keyPrefix = DEFAULTS.keyPrefix,
      lockTimeoutMs = DEFAULTS.lockTimeoutMs,
      migrateAttempts = DEFAULTS.migrateAttempts,
      transactionLockTimeoutMs,
      transactionIdleTimeoutMs,
      statementTimeoutMs = DEFAULTS.statementTimeoutMs,
      acquireTimeoutMs = DEFAULTS.acquireTimeoutMs,
      sweepIntervalMs = DEFAULTS.sweepIntervalMs,
      sweepBatch = DEFAULTS.sweepBatch,
      sweepBudgetMs = DEFAULTS.sweepBudgetMs,
      onEvent = emitProcessWarning,
    } = options
    if (typeof pool !== 'object' || pool === null || typeof pool.connect !== 'function') {
      invalidOption('pool', 'a pg.Pool (node-postgres)', pool)
    }
    if (typeof table !== 'string' || !IDENTIFIER.test(table)) {
      invalidOption('table', 'lowercase letters, digits and _, starting with a letter or _, at most 40', table)
    }
    if (typeof schema !== 'string' || !IDENTIFIER.test(schema)) {
      invalidOption('schema', 'lowercase letters, digits and _, starting with a letter or _, at most 40', schema)
    }
    checkKeyPrefix(keyPrefix)
    this.#lockTimeoutMs = checkMs('lockTimeoutMs', lockTimeoutMs, 1)
    this.#statementTimeoutMs = checkMs('statementTimeoutMs', statementTimeoutMs, 1)
    if (statementTimeoutMs <= lockTimeoutMs) {
      invalidOption('statementTimeoutMs', `more than lockTimeoutMs (${lockTimeoutMs})`, statementTimeoutMs)
    }
    this.#acquireTimeoutMs = checkMs('acquireTimeoutMs', acquireTimeoutMs, 1)
    this.#migrateAttempts = integerOption('migrateAttempts', migrateAttempts, 1, 100)
    this.#transactionLockTimeoutMs =
      transactionLockTimeoutMs === undefined
        ? undefined
        : checkMs('transactionLockTimeoutMs', transactionLockTimeoutMs, 1)
    this.#transactionIdleTimeoutMs =
      transactionIdleTimeoutMs === undefined
        ? undefined
        : checkMs('transactionIdleTimeoutMs', transactionIdleTimeoutMs, 1)
    checkMs('sweepIntervalMs', sweepIntervalMs, 0)
    integerOption('sweepBatch', sweepBatch, 1, 100_000)
    if (typeof onEvent !== 'function') invalidOption('onEvent', 'a function (event) => void', onEvent)

    this.keyPrefix = keyPrefix
    this.table = `${schema}.${table}`
    this.#pool = pool
    this.#schemaName = schema
    this.#tableName = table
    this.#sweepBatch = sweepBatch
    this.#onEvent = (event) => {
      publishStoreEvent('postgres', event)
      try {
        onEvent(event)
      } catch {
        // An observer never changes what the store does.
      }
    }
    this.#sql = statements(schema, table)
    this.#sweepLock = lockKey('sweep', schema, table)
    this.#sweepIntervalMs = sweepIntervalMs
    this.#sweepBudgetMs = checkMs('sweepBudgetMs', sweepBudgetMs, 1)
    this.#scheduleSweep(sweepIntervalMs)
  }

  /**
   * The schema version in place, read from the catalog (the table's comment): no lock on the
   * table, nothing written. 0 when the table is not there.
   * @throws StoreUnavailableError when no connection could be had.
   */
  async schemaVersion(): Promise<number> {
    const { rows } = await this.#query({
      name: `idemkit_schema_version_${this.#sql.tag}`,
      text: `SELECT obj_description(to_regclass($1), 'pg_class'), to_regclass($1) IS NOT NULL`,
      values: [this.table],
      rowMode: 'array',
    })
    return versionOf(rows[0])
  }

  /**
   * Brings the table and its functions to this version's schema by applying the numbered
   * migration files after the version in place (`migrationSql()`), in one transaction under an
   * advisory lock: safe to run from every instance at startup.
   *
   * At this version already (every start but the first of a release) it only reads the
   * catalog: no lock on the table, so it never waits for, or holds up, a transaction writing
   * records. When it must change something, every lock it takes waits at most `lockTimeoutMs`
   * (`lock_timeout`); then it rolls back, reports what holds the lock (a `migrate-waiting`
   * event: the sessions, their state and age) and tries again, `migrateAttempts` times in all.
   * Functions are named with the schema version that added them (`<table>_claim_v3`, `<table>_inspect_v2`); a later
   * migration adds functions of its own or replaces bodies with the same behaviour, never what
   * a function answers, so instances of the previous version keep running during a rolling deploy. Needs the right to
   * create tables and functions in the schema.
   * @returns the schema version now in place.
   * @throws StoreUnavailableError when no connection could be had, the lock could not be had
   *   in `migrateAttempts` tries (the message names its holders), or PostgreSQL refused.
   */
  async migrate(): Promise<{ readonly version: number }> {
    const found = await this.schemaVersion()
    if (found >= POSTGRES_SCHEMA_VERSION) return { version: found }
    for (let attempt = 1; ; attempt++) {
      const waitedOn = await this.#migrateOnce()
      if (waitedOn === undefined) return { version: POSTGRES_SCHEMA_VERSION }
      const message =
        `migrate() waited ${this.#lockTimeoutMs} ms (lockTimeoutMs) for a lock on ${this.table} ` +
        `(try ${attempt} of ${this.#migrateAttempts}); held by ${waitedOn}`
      if (attempt >= this.#migrateAttempts) {
        throw new StoreUnavailableError(`${message}. Nothing was changed; run migrate() again once they end.`)
      }
      this.#onEvent({ type: 'migrate-waiting', message, attempt })
      await new Promise((resolve) => setTimeout(resolve, Math.min(5_000, 100 * 2 ** attempt)))
    }
  }

  /**
   * One try of `migrate()`: `undefined` once applied (or found applied under the lock), else,
   * after a lock timeout, who holds the locks it waited for.
   */
  async #migrateOnce(): Promise<string | undefined> {
    const client = await this.#acquire()
    client.on('error', ignore)
    let broken: Error | undefined
    try {
      await client.query(`BEGIN; SET LOCAL lock_timeout = '${this.#lockTimeoutMs}ms'`)
      try {
        await client.query(`SELECT pg_advisory_xact_lock(${lockKey('migrate', this.#schemaName, this.#tableName)})`)
        // Under the lock: another instance may have applied it meanwhile.
        const result = (await client.query(
          `SELECT obj_description(to_regclass('${this.table}'), 'pg_class'), to_regclass('${this.table}') IS NOT NULL`,
        )) as { rows: Record<string, unknown>[] }
        const version = versionOf(Object.values(result.rows[0] ?? {}))
        if (version < POSTGRES_SCHEMA_VERSION) {
          if (this.#schemaName !== 'public') await client.query(`CREATE SCHEMA IF NOT EXISTS ${this.#schemaName}`)
          await client.query(migrationSql(this.#schemaName, this.#tableName, version))
        }
        await client.query('COMMIT')
        return undefined
      } catch (error) {
        if ((error as { code?: unknown }).code !== '55P03') throw error
        await client.query('ROLLBACK')
        return await this.#lockHolders(client)
      }
    } catch (error) {
      if ((error as { severity?: unknown }).severity === 'ERROR') await client.query('ROLLBACK').catch(() => undefined)
      else broken = error instanceof Error ? error : new Error(String(error))
      // Run again after any failure: nothing of a failed try is kept.
      throw postgresFault(error, true)
    } finally {
      client.release(broken)
      client.removeListener('error', ignore)
    }
  }

  /** The other sessions holding a lock on the table or the migration's advisory lock, for a message. */
  async #lockHolders(client: PostgresClient): Promise<string> {
    const key = BigInt(lockKey('migrate', this.#schemaName, this.#tableName))
    const high = Number(BigInt.asUintN(64, key) >> 32n)
    const low = Number(BigInt.asUintN(32, key))
    const result = (await client.query(
      `SELECT string_agg(DISTINCT format('pid %s (%s, %s, transaction open %s ms: %s)', a.pid, coalesce(a.application_name, ''),
          a.state, coalesce(round(extract(epoch FROM clock_timestamp() - a.xact_start) * 1000), 0),
          left(regexp_replace(coalesce(a.query, ''), '\\s+', ' ', 'g'), 80)), '; ')
       FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
       WHERE l.granted AND a.pid <> pg_backend_pid()
         AND (l.relation = to_regclass('${this.table}')
           OR (l.locktype = 'advisory' AND l.classid::bigint = ${high} AND l.objid::bigint = ${low}))`,
    )) as { rows: Record<string, unknown>[] }
    const holders = Object.values(result.rows[0] ?? {})[0]
    return typeof holders === 'string' ? holders : 'a session that has ended since'
  }

  /**
   * Deletes expired rows now (what the sweeper does every `sweepIntervalMs`): rows whose
   * `expires_at` has passed, which claim and inspect already treat as absent; a row another
   * session holds locked is left for the next round.
   * @returns the rows deleted, or -1 when another instance is sweeping this table right now.
   */
  async sweep(): Promise<number> {
    const round = await this.#sweepFor()
    return round === undefined ? -1 : round.deleted
  }

  /**
   * One round of the sweeper: statements of `sweepBatch` rows until one deletes fewer (nothing
   * left) or `sweepBudgetMs` has passed (`behind`: expired rows remain). `undefined` when
   * another instance holds the sweep lock.
   */
  async #sweepFor(): Promise<{ deleted: number; behind: boolean; elapsedMs: number } | undefined> {
    const started = performance.now()
    let deleted = 0
    for (let statement = 0; ; statement++) {
      const row = await this.#call(this.#sql.sweep, [this.#sweepBatch, this.#sweepLock])
      const n = Number(row[0])
      if (!Number.isSafeInteger(n) || n < -1) throw protocolError('sweep', 'column 0 is not a row count')
      const elapsedMs = Math.round(performance.now() - started)
      if (n === -1) return statement === 0 ? undefined : { deleted, behind: false, elapsedMs }
      deleted += n
      if (n < this.#sweepBatch) return { deleted, behind: false, elapsedMs }
      if (elapsedMs >= this.#sweepBudgetMs) return { deleted, behind: true, elapsedMs }
    }
  }

  /** The sweeper's round, then the next one: after `sweepIntervalMs`, or at once when behind. */
  async #sweepRound(): Promise<void> {
    let behind = false
    try {
      const round = await this.#sweepFor()
      this.#sweepFailed = false
      if (round !== undefined && round.deleted > 0) {
        const { deleted, elapsedMs } = round
        this.#onEvent({ type: 'swept', message: `Deleted ${deleted} expired rows from ${this.table}.`, deleted })
        behind = round.behind
        if (behind && !this.#sweepBehind) {
          this.#onEvent({
            type: 'sweep-behind',
            message:
              `The sweep of ${this.table} deleted ${deleted} expired rows in ${elapsedMs} ms (sweepBudgetMs) and ` +
              'expired rows remain: expired records arrive faster than one round per sweepIntervalMs removes them. ' +
              'The next round starts at once; raise sweepBatch or sweepBudgetMs, or lower sweepIntervalMs.',
            deleted,
            elapsedMs,
          })
        }
      }
      this.#sweepBehind = behind
    } catch (error) {
      if (!this.#sweepFailed) {
        this.#sweepFailed = true
        this.#onEvent({
          type: 'sweep-failed',
          message: `Sweeping expired rows from ${this.table} failed: ${error instanceof Error ? error.message : String(error)}`,
          error,
        })
      }
    } finally {
      // Behind: a short pause only, so the database serves claims between rounds too.
      this.#scheduleSweep(behind ? Math.min(this.#sweepIntervalMs, SWEEP_CATCH_UP_PAUSE_MS) : this.#sweepIntervalMs)
    }
  }

  #scheduleSweep(delayMs: number): void {
    if (this.#closed || this.#sweepIntervalMs === 0) return
    this.#sweeper = setTimeout(() => void this.#sweepRound(), delayMs)
    // The sweeper never keeps the process alive.
    this.#sweeper.unref()
  }

  // Every call's arguments were checked by the front (src/core/store-front.ts): each method
  // here is its one statement.

  protected doClaim(request: ClaimRequest): Promise<ClaimResult> {
    const values = [
      request.key,
      request.owner,
      request.fingerprint,
      request.operation,
      request.codec,
      request.policy,
      request.start,
      request.expiredExecution === 'takeover',
      request.leaseMs,
      request.failureRetentionMs,
      request.legacyFingerprints ?? [],
      this.#lockTimeoutMs,
    ]
    return this.#call(this.#sql.claim, values).then(decodeClaim)
  }

  protected doInspect(key: string, owner: string): Promise<InspectResult> {
    return this.#call(this.#sql.inspect, [key, owner]).then(decodeInspect)
  }

  protected doStart(ref: OwnerRef, times: RecordTimes): Promise<TransitionResult> {
    const values = [
      ref.key,
      ref.owner,
      ref.attempt,
      ref.rev,
      times.leaseMs,
      times.failureRetentionMs,
      this.#lockTimeoutMs,
    ]
    return this.#call(this.#sql.start, values).then((row) => decodeTransition('start', row))
  }

  protected doComplete(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult> {
    // pg sends a Buffer as a binary parameter: the bytes as they are.
    const bytes = Buffer.isBuffer(response)
      ? response
      : Buffer.from(response.buffer, response.byteOffset, response.byteLength)
    const values = [ref.key, ref.owner, ref.attempt, ref.rev, times.replayWindowMs, bytes, this.#lockTimeoutMs]
    return this.#call(this.#sql.complete, values).then(decodeComplete)
  }

  protected doMarkFailed(ref: OwnerRef, kind: FailureKind, times: RecordTimes): Promise<TransitionResult> {
    const values = [
      ref.key,
      ref.owner,
      ref.attempt,
      ref.rev,
      kind === FailureKind.RETRYABLE,
      times.failureRetentionMs,
      this.#lockTimeoutMs,
    ]
    return this.#call(this.#sql.markFailed, values).then((row) => decodeTransition('mark_failed', row))
  }

  protected doRelease(ref: OwnerRef): Promise<TransitionResult> {
    const values = [ref.key, ref.owner, ref.attempt, ref.rev, this.#lockTimeoutMs]
    return this.#call(this.#sql.release, values).then((row) => decodeTransition('release', row))
  }

  protected doRenew(ref: OwnerRef, times: RecordTimes): Promise<RenewResult> {
    const open = this.#inTransaction.get(ref.key)
    const inTransaction = open !== undefined && open.attempt === ref.attempt
    // The run is alive: its transaction's session is not idle (see transactionIdleTimeoutMs).
    if (inTransaction) open.transaction.touch()
    const values = [
      ref.key,
      ref.owner,
      ref.attempt,
      times.leaseMs,
      times.failureRetentionMs,
      this.#lockTimeoutMs,
      // A run in a transaction of this store's: its lease moves in the leases table (002-functions.sql).
      inTransaction,
    ]
    return this.#call(this.#sql.renew, values).then(decodeRenew)
  }

  /**
   * The row under `key` as stored, live or not, with the database's clock: for operators
   * (`idemkit inspect`).
   */
  async read(key: string): Promise<ReadResult> {
    checkKey(key)
    const row = await this.#call(this.#sql.read, [key])
    const now = integer('read', row, 0, 0)
    return { now, record: row[1] === null ? undefined : recordAt('read', row, 1) }
  }

  /**
   * Operators only: replaces (or deletes) the row if it is still `expected`: the same state,
   * owner, attempt, rev and times (see `IdempotencyStore.replace`). One statement.
   */
  async replace(key: string, expected: RecordView, next: RecordView | undefined): Promise<boolean> {
    checkKey(key)
    const was = [
      key,
      expected.state,
      expected.owner,
      expected.attempt,
      expected.rev,
      expected.leaseUntil,
      expected.expiresAt,
      expected.updatedAt,
    ]
    const row =
      next === undefined
        ? await this.#call(this.#sql.delete, was)
        : await this.#call(this.#sql.replace, [
            ...was,
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
            next.state === 'COMPLETED' ? next.response : null,
          ])
    return Number(row[0]) === 1
  }

  /**
   * Operators only: every row under this store's key prefix, in key order, 500 rows per
   * statement (keyset pagination), with the database's clock.
   */
  async *scan(): AsyncIterable<ScannedRecord> {
    const prefix = `${this.keyPrefix}:idem:`
    let after = ''
    for (;;) {
      const { rows } = await this.#query(prepared(this.#sql.scan, [prefix, after]))
      for (const row of rows) {
        yield { key: text('scan', row, 1), now: integer('scan', row, 0, 0), record: recordAt('scan', row, 2) }
      }
      if (rows.length < SCAN_PAGE) return
      after = text('scan', rows[rows.length - 1] as unknown[], 1)
    }
  }

  /**
   * The startup report: PostgreSQL's version, the settings that decide whether a commit
   * survives a crash (`synchronous_commit`, `fsync`), whether the table is there, logged and at
   * this schema version, with a warning for each that can lose records or answers.
   * @throws StoreUnavailableError when no connection could be had.
   */
  async describe(): Promise<StoreReport> {
    const result = await this.#query(prepared(this.#sql.describe, [this.table]))
    const [version, synchronousCommit, fsync, persistence, comment] = oneRow('describe', result).map((value) =>
      value === null ? null : String(value),
    )
    const warnings: string[] = []
    if (synchronousCommit === 'off') {
      warnings.push('synchronous_commit is off: a crash can lose commits the store was told about')
    }
    if (fsync === 'off') warnings.push('fsync is off: a power loss or an OS crash can lose committed records')
    if (persistence === null) warnings.push(`${this.table} does not exist: run store.migrate()`)
    else if (persistence !== 'p') warnings.push(`${this.table} is not a logged table: a crash empties it`)
    else if (comment !== `idemkit records, schema ${POSTGRES_SCHEMA_VERSION}`) {
      warnings.push(`${this.table} is not at schema ${POSTGRES_SCHEMA_VERSION}: run store.migrate()`)
    }
    return {
      store: this.name,
      version: version ?? undefined,
      settings: {
        table: this.table,
        synchronous_commit: synchronousCommit ?? 'unknown',
        fsync: fsync ?? 'unknown',
        logged: persistence === 'p',
      },
      warnings,
    }
  }

  /** Stops the sweeper. The pool is the application's: it is never ended here. */
  async close(): Promise<void> {
    this.#closed = true
    if (this.#sweeper !== undefined) clearTimeout(this.#sweeper)
    this.#sweeper = undefined
  }

  /**
   * A connection from the pool within `acquireTimeoutMs`, else `StoreUnavailableError`. A
   * connection that arrives after the store gave up on it goes straight back to the pool.
   */
  #acquire(): Promise<PostgresClient> {
    if (this.#closed)
      return Promise.reject(new StoreUnavailableError('The PostgreSQL store is closed; nothing was sent.'))
    return new Promise((resolve, reject) => {
      let waiting = true
      const timer = setTimeout(() => {
        waiting = false
        reject(
          new StoreUnavailableError(
            `The pool gave no PostgreSQL connection within ${this.#acquireTimeoutMs} ms (acquireTimeoutMs); nothing was sent.`,
          ),
        )
      }, this.#acquireTimeoutMs)
      let connecting: Promise<PostgresClient>
      try {
        connecting = this.#pool.connect()
      } catch (error) {
        clearTimeout(timer)
        reject(postgresFault(error, false))
        return
      }
      connecting.then(
        (client) => {
          clearTimeout(timer)
          if (waiting) resolve(client)
          else client.release()
        },
        (error: unknown) => {
          clearTimeout(timer)
          if (waiting) reject(postgresFault(error, false))
        },
      )
    })
  }

  /**
   * One statement on a connection of its own, answered within `statementTimeoutMs`. The
   * connection goes back to the pool after a reply (rows or an ERROR); after a lost connection
   * or a timeout it is destroyed, so nothing else ever reads what this call left on it.
   */
  async #call(statement: Statement, values: unknown[]): Promise<unknown[]> {
    // Every call of a record has its key first (the sweep's first value is a number).
    const key = typeof values[0] === 'string' ? values[0] : undefined
    return oneRow(statement.name, await this.#query(prepared(statement, values), key))
  }

  /**
   * `query` on a connection of its own (see `#call`), all its rows. A serialization failure or
   * a deadlock (SQLSTATE 40001, 40P01: under REPEATABLE READ or SERIALIZABLE, e.g. a
   * database-wide `default_transaction_isolation`, a claim that waited for a concurrent
   * takeover) rolled the statement's own transaction back, so nothing was applied: it is sent
   * again, up to `SERIALIZATION_TRIES` times in all, instead of failing the call.
   */
  async #query(query: PostgresQuery, key?: string): Promise<{ rows: unknown[][] }> {
    for (let tries = 1; ; tries++) {
      try {
        return await this.#queryOnce(query, true, key)
      } catch (error) {
        const code = ((error as { cause?: unknown }).cause as { code?: unknown } | undefined)?.code
        if (
          !(error instanceof StoreUnavailableError) ||
          !SERIALIZATION_FAILURES.has(code) ||
          tries >= SERIALIZATION_TRIES
        ) {
          throw error
        }
        // A little apart, so the calls that collided do not collide again.
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 5 * tries))
      }
    }
  }

  /**
   * One send of `query` (see `#query`) about the record under `key`, if any; `endOnTimeout`
   * false for the call that ends a session.
   */
  async #queryOnce(query: PostgresQuery, endOnTimeout = true, key?: string): Promise<{ rows: unknown[][] }> {
    const earlier = key === undefined ? undefined : this.#undecided.get(key)
    if (earlier !== undefined) {
      // An earlier call of this record got no reply and its session is not known to be gone:
      // that call may still be applied, so no call of the record is answered (an inspect would
      // read a record it may still change) until the session is ended.
      if (!(await this.#endSession(earlier))) {
        throw new StoreUnavailableError(
          'An earlier call of this record got no reply and its PostgreSQL session is still there (it may still be ' +
            'applied); nothing was sent. Try again once it is gone.',
        )
      }
      this.#undecided.delete(key as string)
    }
    const client = await this.#acquire()
    // A connection checked out of a pg.Pool has no 'error' listener of the pool's: a socket
    // that dies under the call would otherwise throw from the client's emitter. The call's own
    // rejection is what counts; the listener goes once the connection is back in the pool,
    // whose listener takes over.
    client.on('error', ignore)
    let reply: { rows: unknown[][] }
    try {
      reply = await timedQuery(client, query, this.#statementTimeoutMs)
    } catch (error) {
      client.release(brokenBy(error))
      client.removeListener('error', ignore)
      if (!(error instanceof StoreIndeterminateError) || !endOnTimeout) throw postgresFault(error, true)
      // No reply in time. Closing the connection does not stop a statement the server is
      // running (or has yet to read): it could still land after the caller inspected the
      // record on another connection of the pool and found nothing. So the session is ended
      // on the server, and no later call of the record is sent before it is gone (then the
      // statement has either been applied or never will be, and inspecting tells which).
      const pid = client.processID
      if (typeof pid === 'number' && key !== undefined) {
        this.#undecided.set(key, pid)
        void this.#endSession(pid).then((ended) => {
          if (ended && this.#undecided.get(key) === pid) this.#undecided.delete(key)
        })
      }
      throw new StoreIndeterminateError(
        `PostgreSQL did not answer within ${this.#statementTimeoutMs} ms (statementTimeoutMs); the call may or may not ` +
          'have been applied: inspect the record to find out (its server session is ended first).',
        { cause: error },
      )
    }
    client.release()
    client.removeListener('error', ignore)
    return reply
  }

  /**
   * Ends the server session `pid` (pg_terminate_backend, PostgreSQL 14+) from another
   * connection and waits for it to be gone, at most `statementTimeoutMs`.
   * @returns whether it is gone: its last statement is then either applied or rolled back.
   */
  async #endSession(pid: number): Promise<boolean> {
    try {
      const { rows } = await this.#queryOnce(
        {
          name: `idemkit_end_session_${this.#sql.tag}`,
          text: 'SELECT pg_terminate_backend($1::int, $2::bigint) OR NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1::int)',
          values: [pid, Math.max(1, this.#statementTimeoutMs - 100)],
          rowMode: 'array',
        },
        false,
      )
      return rows[0]?.[0] === true
    } catch {
      return false
    }
  }

  /**
   * Opens a transaction for one run on a connection of its own (docs/design.md §6): the
   * action writes through its `db`, and `commit()` writes the completion in the same
   * transaction. The connection stays checked out of the pool until then.
   * @throws StoreUnavailableError when no connection could be had or `BEGIN` failed (nothing
   *   can have happened either way).
   */
  async beginTransaction(run?: OwnerRef, times?: Pick<RecordTimes, 'leaseMs'>): Promise<PostgresTransaction> {
    const client = await this.#acquire()
    client.on('error', ignore)
    // Bounded waits (SET, not a query: the action may still choose its isolation level first).
    // A stale owner, paused or cut off mid-run, holds its row locks at most an idle lease: the
    // server then ends its session and the locks go, so the new owner, which may take over
    // only after a lease, waits for them about that long at most, and gives up after its own
    // lock_timeout instead of waiting without bound.
    const leaseMs = times?.leaseMs
    const lockTimeoutMs = this.#transactionLockTimeoutMs ?? leaseMs
    const idleTimeoutMs = this.#transactionIdleTimeoutMs ?? leaseMs
    const begin = [
      'BEGIN',
      ...(lockTimeoutMs === undefined ? [] : [`SET LOCAL lock_timeout = ${lockTimeoutMs}`]),
      ...(idleTimeoutMs === undefined ? [] : [`SET LOCAL idle_in_transaction_session_timeout = ${idleTimeoutMs}`]),
    ].join('; ')
    try {
      await timedQuery(client, begin, this.#statementTimeoutMs)
    } catch (error) {
      client.release(brokenBy(error))
      client.removeListener('error', ignore)
      const message = error instanceof Error ? error.message : String(error)
      throw new StoreUnavailableError(`The PostgreSQL store could not begin a transaction (${message}).`, {
        cause: error,
      })
    }
    const ended = () => {
      if (run !== undefined && this.#inTransaction.get(run.key)?.transaction === transaction) {
        this.#inTransaction.delete(run.key)
      }
    }
    const transaction = new PostgresTransaction(
      client,
      this.#sql.complete,
      this.#lockTimeoutMs,
      this.#statementTimeoutMs,
      ended,
    )
    if (run !== undefined) this.#inTransaction.set(run.key, { attempt: run.attempt, transaction })
    return transaction
  }
}
