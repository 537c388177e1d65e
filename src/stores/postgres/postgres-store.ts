/**
 * The PostgreSQL store (docs/design.md §6): one row per scope in one table, every operation one
 * call of a PL/pgSQL function (the ones it calls in sql/functions/2-operations.sql), the twin of
 * its Lua script, sent as a named prepared statement: one round trip per operation. A first
 * execution and a replay take a plain statement first, which answers where it is certain and
 * never waits for a row (statements.ts `fastStatements`), the function on a second round trip
 * where it is not. The store takes the application's `pg.Pool`
 * and never ends it; `pg` itself is never imported here (the pool is all it needs), so the
 * package has no runtime dependency on it.
 *
 * This file only wires the rooms of this folder: options.ts (the options and their checks),
 * connection.ts (`withClient`: checkout, timeouts, a stalled session ended), faults.ts (not
 * applied or maybe applied), statements.ts (what is sent), rows.ts (what comes back),
 * migrations.ts (the schema and `migrate()`), transaction.ts (`transaction: true`),
 * app-transaction.ts (`transaction: <adapter>`), run-transaction.ts (what those two share),
 * sweeper.ts (expired rows deleted) and verify.ts (the role's privileges, the schema version, the clock).
 */

import { StoreUnavailableError } from '../../core/errors.js'
import type * as Store from '../../core/store.js'
import { checkKey } from '../../core/store-args.js'
import { type MarkFailedArgs, StoreFront } from '../../core/store-front.js'
import type { AppTransactions, TransactionalStore } from '../../core/store-transaction.js'
import type { AppTransaction } from './app-transaction.js'
import { Connection } from './connection.js'
import { postgresEndpoint } from './endpoint.js'
import { isLockTimeout, messageOf } from './faults.js'
import { Migrations, POSTGRES_SCHEMA_VERSION } from './migrations.js'
import { type PostgresStoreOptions, postgresSettings } from './options.js'
import {
  decodeClaim,
  decodeComplete,
  decodeDescribe,
  decodeInspect,
  decodeRead,
  decodeRenew,
  decodeScanned,
  decodeTransition,
  oneRow,
  scannedKey,
} from './rows.js'
import {
  claimValues,
  completeValues,
  fastClaimValues,
  fastCompleteValues,
  markFailedValues,
  prepared,
  releaseValues,
  renewValues,
  replaceValues,
  SCAN_PAGE,
  type Statement,
  type Statements,
  startValues,
  statements,
} from './statements.js'
import { Sweeper } from './sweeper.js'
import { type PostgresTransaction, RunTransactions } from './transaction.js'
import { findings, findingWarnings, type PostgresVerifyReport, verifyPostgres } from './verify.js'

/** The PostgreSQL store. Create it with `postgresStore()`. */
export class PostgresStore extends StoreFront implements TransactionalStore {
  readonly name = 'postgres'
  readonly keyPrefix: string
  /** The table's qualified name, `<schema>.<table>`. */
  readonly table: string
  readonly #lockTimeoutMs: number
  readonly #connection: Connection
  readonly #sql: Statements
  readonly #migrations: Migrations
  readonly #transactions: RunTransactions
  readonly #sweeper: Sweeper
  readonly #endpoint: Store.StoreEndpoint
  readonly #names: { readonly schema: string; readonly table: string }
  /**
   * Whether the table is at this build's schema version or later, so the fast statements may
   * run: read from the catalog once (a table at an earlier version gets the functions, whose
   * absence says to run `migrate()`); only a yes is kept.
   */
  #migrated: Promise<boolean> | boolean = false

  /**
   * @param options see `PostgresStoreOptions`.
   * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for a missing pool, an unknown option or
   *   a value out of range.
   */
  constructor(options: PostgresStoreOptions) {
    super()
    const settings = postgresSettings(options)
    const { schema, table } = settings
    this.keyPrefix = settings.keyPrefix
    this.table = `${schema}.${table}`
    this.#lockTimeoutMs = settings.lockTimeoutMs
    this.#connection = new Connection(settings)
    this.#sql = statements(schema, table, POSTGRES_SCHEMA_VERSION)
    this.#migrations = new Migrations(this.#connection, this.#sql.schemaVersion, settings)
    this.#transactions = new RunTransactions(this.#connection, this.#sql, settings)
    this.#sweeper = new Sweeper(this.#connection, this.#sql.sweep, settings)
    this.#endpoint = postgresEndpoint(settings.pool, this.table)
    this.#names = { schema, table }
  }

  /**
   * Checks the database for the role the pool connects as (verify.ts): the table at this
   * schema version, USAGE on the schema, SELECT, INSERT, UPDATE and DELETE on the table and its
   * leases table, EXECUTE on its functions; and reads the database's clock. Call it at startup,
   * after `migrate()`, so a deployment whose role cannot run the store does not start.
   * @returns the role, the table's owner, the schema version and the clock offset.
   * @throws IdempotencyError `ERR_IDEM_STORE_MISCONFIGURED` naming each problem and its fix
   *   (`idemkit migrate` as the owner, the GRANTs to run); StoreUnavailableError when no
   *   connection could be had.
   */
  verify(): Promise<PostgresVerifyReport> {
    return verifyPostgres(this.#connection, this.#names, POSTGRES_SCHEMA_VERSION)
  }

  /** Where the server is, for telemetry (endpoint.ts). */
  endpoint(): Store.StoreEndpoint {
    return this.#endpoint
  }

  /**
   * The schema version in place, read from the catalog (the table's comment): no lock on the
   * table, nothing written. 0 when the table is not there.
   * @throws StoreUnavailableError when no connection could be had.
   */
  schemaVersion(): Promise<number> {
    return this.#migrations.version()
  }

  /**
   * Brings the table and its functions to this version's schema (`migrationSql()`), in one
   * transaction under an advisory lock: safe to run from every instance at startup.
   *
   * At this version already (every start but the first of a release) it only reads the
   * catalog: no lock on the table, so it never waits for, or holds up, a transaction writing
   * records. When it must change something, every lock it takes waits at most `lockTimeoutMs`
   * (`lock_timeout`); then it rolls back, reports what holds the lock (a `migrate-waiting`
   * event: the sessions, their state and age) and tries again, `migrateAttempts` times in all.
   * Functions are named with the schema version that added them (`<table>_claim_v4`,
   * `<table>_inspect_v2`); a later migration adds functions of its own or replaces bodies with
   * the same behaviour, never what a function answers, so instances of the previous version keep
   * running during a rolling deploy. Needs the right to create tables and functions in the schema.
   * @returns the schema version now in place.
   * @throws StoreUnavailableError when no connection could be had, the lock could not be had
   *   in `migrateAttempts` tries (the message names its holders), or PostgreSQL refused.
   */
  migrate(): Promise<{ readonly version: number }> {
    return this.#migrations.migrate().then((done) => {
      if (done.version >= POSTGRES_SCHEMA_VERSION) this.#migrated = true
      return done
    })
  }

  /**
   * Deletes expired rows now (what the sweeper does every `sweepIntervalMs`): rows whose
   * `expires_at` has passed, which claim and inspect already treat as absent; a row another
   * session holds locked is left for the next round.
   * @returns the rows deleted, or -1 when another instance is sweeping this table right now.
   */
  sweep(): Promise<number> {
    return this.#sweeper.sweep()
  }

  // Every call's arguments were checked by the front (src/core/store-front.ts): each method
  // here is its one statement.

  protected doClaim(request: Store.ClaimRequest): Promise<Store.ClaimResult> {
    return this.#fastOr(this.#sql.fastClaim, fastClaimValues(request), this.#sql.claim, () =>
      claimValues(request, this.#lockTimeoutMs),
    ).then(decodeClaim)
  }

  protected doInspect(key: string, owner: string): Promise<Store.InspectResult> {
    return this.#call(this.#sql.inspect, [key, owner]).then(decodeInspect)
  }

  protected doStart(ref: Store.OwnerRef, times: Store.RecordTimes): Promise<Store.TransitionResult> {
    return this.#call(this.#sql.start, startValues(ref, times, this.#lockTimeoutMs)).then((row) =>
      decodeTransition('start', row),
    )
  }

  protected doComplete(
    ref: Store.OwnerRef,
    response: Uint8Array,
    times: Store.RecordTimes,
  ): Promise<Store.TransitionResult> {
    return this.#fastOr(this.#sql.fastComplete, fastCompleteValues(ref, response, times), this.#sql.complete, () =>
      completeValues(ref, response, times, this.#lockTimeoutMs),
    ).then(decodeComplete)
  }

  protected doMarkFailed(...[ref, kind, times, cause]: MarkFailedArgs): Promise<Store.TransitionResult> {
    const values = markFailedValues(ref, kind, times, this.#lockTimeoutMs, cause)
    return this.#call(this.#sql.markFailed, values).then((row) => decodeTransition('mark_failed', row))
  }

  protected doRelease(ref: Store.OwnerRef): Promise<Store.TransitionResult> {
    return this.#call(this.#sql.release, releaseValues(ref, this.#lockTimeoutMs)).then((row) =>
      decodeTransition('release', row),
    )
  }

  protected doRenew(ref: Store.OwnerRef, times: Store.RecordTimes): Promise<Store.RenewResult> {
    // A run in a transaction of this store's: its lease moves in the leases table.
    const values = renewValues(ref, times, this.#lockTimeoutMs, this.#transactions.renewing(ref))
    return this.#call(this.#sql.renew, values).then(decodeRenew)
  }

  /**
   * Opens a transaction for one run on a connection of its own (docs/design.md §6): the action
   * writes through its `db`, and `commit()` writes the completion in the same transaction
   * (transaction.ts). The connection stays checked out of the pool until then.
   * @throws StoreUnavailableError when no connection could be had or `BEGIN` failed (nothing
   *   can have happened either way).
   */
  beginTransaction(
    run?: Store.OwnerRef,
    times?: Pick<Store.RecordTimes, 'leaseMs'>,
    app?: AppTransactions,
  ): Promise<PostgresTransaction | AppTransaction> {
    // With an ORM's adapter: the ORM's transaction, the store's statements through its port.
    if (app !== undefined) return this.#transactions.beginIn(app, run, times)
    return this.#transactions.begin(run, times)
  }

  /**
   * The row under `key` as stored, live or not, with the database's clock: for operators
   * (`idemkit inspect`).
   */
  async read(key: string): Promise<Store.ReadResult> {
    checkKey(key)
    return decodeRead(await this.#call(this.#sql.read, [key]))
  }

  /**
   * Operators only: replaces (or deletes) the row if it is still `expected`: the same state,
   * owner, attempt, rev and times (see `IdempotencyStore.replace`). One statement.
   */
  async replace(key: string, expected: Store.RecordView, next: Store.RecordView | undefined): Promise<boolean> {
    checkKey(key)
    const statement = next === undefined ? this.#sql.delete : this.#sql.replace
    const row = await this.#call(statement, replaceValues(key, expected, next))
    return Number(row[0]) === 1
  }

  /**
   * Operators only: every row under this store's key prefix, in key order, 500 rows per
   * statement (keyset pagination), with the database's clock.
   */
  async *scan(): AsyncIterable<Store.ScannedRecord> {
    const prefix = `${this.keyPrefix}:idem:`
    let after = ''
    for (;;) {
      const { rows } = await this.#connection.query(prepared(this.#sql.scan, [prefix, after]))
      for (const row of rows) yield decodeScanned(row)
      if (rows.length < SCAN_PAGE) return
      after = scannedKey(rows[rows.length - 1] as unknown[])
    }
  }

  /**
   * The startup report: PostgreSQL's version, the settings that decide whether a commit
   * survives a crash (`synchronous_commit`, `fsync`), whether the table is there, logged and at
   * this schema version, with a warning for each that can lose records or answers.
   * @throws StoreUnavailableError when no connection could be had.
   */
  async describe(): Promise<Store.StoreReport> {
    // The privileges first: describe's own statement needs USAGE on the schema.
    const found = await findings(this.#connection, this.#names, POSTGRES_SCHEMA_VERSION)
    if (found.missing.length > 0 && found.missing[0]?.startsWith('USAGE') === true) {
      return { store: this.name, settings: { table: this.table, role: found.role }, warnings: findingWarnings(found) }
    }
    const result = await this.#connection.query(prepared(this.#sql.describe, [this.table]))
    const report = decodeDescribe(oneRow('describe', result), this.table, POSTGRES_SCHEMA_VERSION)
    return {
      ...report,
      settings: { ...report.settings, role: found.role },
      warnings: [...report.warnings, ...findingWarnings(found)],
    }
  }

  /** Stops the sweeper; nothing is sent after this. The pool is the application's: it is never ended here. */
  async close(): Promise<void> {
    this.#connection.close()
    this.#sweeper.stop()
  }

  /**
   * A fast statement (statements.ts `fastStatements`), and its function when it answered no row
   * (not certain) or met a lock (55P03 after `FAST_LOCK_TIMEOUT`: rolled back, nothing written):
   * the function then decides with the clock read after the row's lock. Two round trips only on
   * those paths; the first execution and the replay take one.
   */
  async #fastOr(fast: Statement, values: unknown[], call: Statement, callValues: () => unknown[]): Promise<unknown[]> {
    if (this.#migrated !== true && !(await this.#checkMigrated())) return this.#call(call, callValues())
    let rows: unknown[][] = []
    try {
      rows = (await this.#connection.query(prepared(fast, values), values[0] as string)).rows
    } catch (error) {
      if (!isLockTimeout(error)) throw error
    }
    if (rows.length === 0) return this.#call(call, callValues())
    return oneRow(fast.name, { rows })
  }

  /**
   * Reads the schema version, one reading at a time; keeps a yes (versions only go up).
   * @throws StoreUnavailableError when it could not be read: the call itself was not sent.
   */
  #checkMigrated(): Promise<boolean> {
    if (typeof this.#migrated !== 'boolean') return this.#migrated
    const reading = this.#migrations.version().then(
      (version) => {
        this.#migrated = version >= POSTGRES_SCHEMA_VERSION
        return this.#migrated
      },
      (error: unknown) => {
        this.#migrated = false
        throw new StoreUnavailableError(
          `The PostgreSQL store could not read its table's schema version (${messageOf(error)}); the call was not sent.`,
          { cause: error },
        )
      },
    )
    this.#migrated = reading
    return reading
  }

  /**
   * One statement on a connection of its own (`Connection.query`), its one row. Every call of a
   * record has its key first: a call given up on has its session ended before the next call of
   * the record.
   */
  async #call(statement: Statement, values: unknown[]): Promise<unknown[]> {
    const key = typeof values[0] === 'string' ? values[0] : undefined
    return oneRow(statement.name, await this.#connection.query(prepared(statement, values), key))
  }
}
