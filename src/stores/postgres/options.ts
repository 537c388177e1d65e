/**
 * The PostgreSQL store's options, their defaults and their checks: `postgresSettings()` turns
 * what `postgresStore()` is given into the settings every other room reads, or refuses it
 * (`ERR_IDEM_INVALID_OPTION`, naming the option and what it accepts).
 */
import { publishStoreEvent } from '../../core/channels.js'
import { integerOption, invalidOption } from '../../core/errors.js'
import { omitUndefined } from '../../core/policy.js'
import { checkKeyPrefix, checkOptionNames } from '../../core/store-front.js'
import type { PostgresPool } from './connection.js'

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

/** The options as the rooms read them: every default filled in, every value checked. */
export interface PostgresSettings {
  readonly pool: PostgresPool
  readonly schema: string
  readonly table: string
  readonly keyPrefix: string
  readonly lockTimeoutMs: number
  readonly migrateAttempts: number
  readonly transactionLockTimeoutMs: number | undefined
  readonly transactionIdleTimeoutMs: number | undefined
  readonly statementTimeoutMs: number
  readonly acquireTimeoutMs: number
  readonly sweepIntervalMs: number
  readonly sweepBatch: number
  readonly sweepBudgetMs: number
  /** `onEvent`, also published on the `idemkit:event` channel; it never throws. */
  readonly emit: (event: PostgresStoreEvent) => void
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

/**
 * The settings of `options`, defaults filled in.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for a missing pool, an unknown option or
 *   a value out of range.
 */
export function postgresSettings(options: PostgresStoreOptions): PostgresSettings {
  checkOptionNames(options, KNOWN_OPTIONS, 'postgresStore options')
  const { pool, transactionLockTimeoutMs, transactionIdleTimeoutMs, onEvent = emitProcessWarning } = options
  // Every other option: its default where it is left out (or undefined).
  const {
    table,
    schema,
    keyPrefix,
    lockTimeoutMs,
    migrateAttempts,
    statementTimeoutMs,
    acquireTimeoutMs,
    sweepIntervalMs,
    sweepBatch,
    sweepBudgetMs,
  } = { ...DEFAULTS, ...omitUndefined(options) }
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
  checkMs('lockTimeoutMs', lockTimeoutMs, 1)
  checkMs('statementTimeoutMs', statementTimeoutMs, 1)
  if (statementTimeoutMs <= lockTimeoutMs) {
    invalidOption('statementTimeoutMs', `more than lockTimeoutMs (${lockTimeoutMs})`, statementTimeoutMs)
  }
  checkMs('acquireTimeoutMs', acquireTimeoutMs, 1)
  integerOption('migrateAttempts', migrateAttempts, 1, 100)
  if (transactionLockTimeoutMs !== undefined) checkMs('transactionLockTimeoutMs', transactionLockTimeoutMs, 1)
  if (transactionIdleTimeoutMs !== undefined) checkMs('transactionIdleTimeoutMs', transactionIdleTimeoutMs, 1)
  checkMs('sweepIntervalMs', sweepIntervalMs, 0)
  integerOption('sweepBatch', sweepBatch, 1, 100_000)
  if (typeof onEvent !== 'function') invalidOption('onEvent', 'a function (event) => void', onEvent)
  checkMs('sweepBudgetMs', sweepBudgetMs, 1)
  const emit = (event: PostgresStoreEvent) => {
    publishStoreEvent('postgres', event)
    try {
      onEvent(event)
    } catch {
      // An observer never changes what the store does.
    }
  }
  return {
    pool,
    schema,
    table,
    keyPrefix,
    lockTimeoutMs,
    migrateAttempts,
    transactionLockTimeoutMs,
    transactionIdleTimeoutMs,
    statementTimeoutMs,
    acquireTimeoutMs,
    sweepIntervalMs,
    sweepBatch,
    sweepBudgetMs,
    emit,
  }
}

/** An integer number of milliseconds from `min` to the largest timer delay. */
function checkMs(name: string, value: unknown, min: number): asserts value is number {
  integerOption(name, value, min, 2_147_483_647, 'milliseconds')
}

/** The default `onEvent`: a process warning for a failed sweep or a sweeper falling behind. */
function emitProcessWarning(event: PostgresStoreEvent): void {
  if (event.type === 'sweep-failed') {
    process.emitWarning(event.message, { type: 'IdempotencyWarning', code: 'IDEMKIT_POSTGRES_SWEEP_FAILED' })
  } else if (event.type === 'sweep-behind') {
    process.emitWarning(event.message, { type: 'IdempotencyWarning', code: 'IDEMKIT_POSTGRES_SWEEP_BEHIND' })
  }
}
