/**
 * A run's transaction on the PostgreSQL store (`transaction: true`, docs/design.md §6): the
 * action's writes and the record's completion commit together or not at all.
 *
 * What a caller uses (the executor's run today, src/core/run/transaction.ts; an ORM's
 * transaction or a recovery point builds on the same):
 *
 * | call | what it does |
 * | --- | --- |
 * | `RunTransactions.begin(run?, times?)` (the store's `beginTransaction`) | checks a connection out of the pool for the run and sends `BEGIN` with bounded waits (`lock_timeout`, `idle_in_transaction_session_timeout`, the lease by default); the connection stays checked out until `commit` or `rollback` |
 * | `transaction.db` | the node-postgres client inside `BEGIN`: every statement of the action goes through it, savepoints included, never `COMMIT` or `ROLLBACK` |
 * | `transaction.commit(ref, response, times)` | the completion (`_complete_v3`, the same owner, attempt and rev check as outside) in the transaction, then `COMMIT`; any answer but OK rolls back and is returned |
 * | `transaction.rollback()` | `ROLLBACK`; never rejects |
 * | `transaction.openStep(ref, name)`, `commitStep(ref, name, result)`, `abandonStep()` | a step (recovery point, sql/008-recovery-points.sql): its point, if committed; the point written fenced, `COMMIT`, and the run's next transaction begun on the same connection; or the step rolled back and the next transaction begun |
 * | `transaction.touch()` | tells the server the run is alive (sent with each lease renewal) |
 * | `RunTransactions.renewing(ref)` | whether `ref`'s run has a transaction open here (its renewal then moves the lease in the leases table), touching it |
 *
 * Each ends the transaction at most once; the connection goes back to the pool when it ends, or
 * is destroyed when its state is unknown (a reply lost, a ROLLBACK that failed).
 */
import { ErrorCode, IdempotencyError, StoreIndeterminateError, StoreUnavailableError } from '../../core/errors.js'
import { type RecordState, TransitionReply } from '../../core/record.js'
import type { OwnerRef, RecordTimes, TransitionResult } from '../../core/store.js'
import type { AppTransactions, StepPoint, SteppedTransaction, TransactionClient } from '../../core/store-transaction.js'
import { type AppTransaction, beginAppTransaction } from './app-transaction.js'
import type { Connection, Session } from './connection.js'
import { brokenBy, messageOf, postgresFault } from './faults.js'
import type { PostgresSettings } from './options.js'
import { decodeComplete, oneRow } from './rows.js'
import { RunTransaction } from './run-transaction.js'
import { completeValues, prepared, stepValues, type TransactionStatements } from './statements.js'

/** The isolation levels a run's next transaction may begin with (`current_setting('transaction_isolation')`). */
const ISOLATION_LEVELS = new Set(['read committed', 'repeatable read', 'serializable', 'read uncommitted'])

/** What a transaction needs of the store: its completion statement and settings. */
type TransactionSettings = Pick<
  PostgresSettings,
  'lockTimeoutMs' | 'statementTimeoutMs' | 'transactionLockTimeoutMs' | 'transactionIdleTimeoutMs'
>

/**
 * One run's transaction (`RunTransactions.begin`). The action writes through `db`; `commit()`
 * runs the complete function in the same transaction, then COMMIT, so the action's writes and
 * the record's completion are committed together or not at all.
 *
 * The lease is renewed meanwhile on other connections of the pool. The renewal locks only the
 * record's row, and this transaction locks that row only in `commit()`, right before COMMIT:
 * a renewal waits at most for that COMMIT, and this transaction never waits for anything a
 * renewal holds, so the two cannot deadlock.
 */
export class PostgresTransaction extends RunTransaction implements SteppedTransaction {
  /** The connection inside the transaction, for the action's statements. */
  readonly db: TransactionClient
  readonly #session: Session
  readonly #statements: TransactionStatements
  readonly #lockTimeoutMs: number
  /** The bounded waits every transaction of the run begins with (`; SET LOCAL ...`). */
  readonly #waits: string
  /** Gives the connection back once the transaction ended; resolves once it is back. */
  readonly #giveBack: () => Promise<void>
  /** The isolation level the step being opened found: the run's next transaction begins with it. */
  #isolation = 'read committed'
  /** Set when a step's COMMIT got no reply: the connection is gone, and nothing after that step committed. */
  #lost: string | undefined

  /**
   * @param session the connection, inside `BEGIN`.
   * @param statements the completion's statement (`_complete_v3`) and the steps'.
   * @param lockTimeoutMs the completion's and a step's own `lock_timeout`.
   * @param waits the `SET LOCAL`s of the run's transactions, each after a `;`.
   * @param giveBack gives the connection back (or has it destroyed, `session.discard`).
   */
  constructor(
    session: Session,
    statements: TransactionStatements,
    lockTimeoutMs: number,
    waits: string,
    giveBack: () => Promise<void>,
  ) {
    super()
    this.#session = session
    this.db = session.client as unknown as TransactionClient
    this.#statements = statements
    this.#lockTimeoutMs = lockTimeoutMs
    this.#waits = waits
    this.#giveBack = giveBack
  }

  protected async doCommit(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult> {
    if (this.#lost !== undefined) {
      throw new StoreUnavailableError(
        `The transaction's connection was lost at the COMMIT of step "${this.#lost}": nothing written after that step was committed.`,
      )
    }
    this.endOnce()
    const session = this.#session
    let committing = false
    try {
      if (session.client.getTransactionStatus?.() === 'I') {
        throw new IdempotencyError(
          ErrorCode.TRANSACTION_ENDED,
          'The action ended its transaction itself (COMMIT or ROLLBACK on idempotency.db): ' +
            'its writes may have been committed without the record.',
        )
      }
      const values = completeValues(ref, response, times, this.#lockTimeoutMs)
      const { complete } = this.#statements
      const reply = await session.send(prepared(complete, values))
      const result = decodeComplete(oneRow(complete.name, reply))
      if (result.kind !== TransitionReply.OK) {
        // Not this run's record any more: nothing of the action's writes is kept.
        await this.#rollbackQuietly()
        return result
      }
      committing = true
      const done = await session.send('COMMIT')
      // COMMIT of a transaction an earlier error aborted answers ROLLBACK, not an error.
      if (done.command !== undefined && done.command !== 'COMMIT') {
        throw new StoreUnavailableError(`PostgreSQL answered ${done.command} to COMMIT: the transaction rolled back.`)
      }
      return result
    } catch (error) {
      const broken = brokenBy(error)
      if (broken !== undefined) session.discard(broken)
      if (committing) {
        // COMMIT was sent: an ERROR (or a ROLLBACK answer) means it rolled back; a reply lost
        // or given up on means it may have committed.
        throw error instanceof StoreUnavailableError ? error : postgresFault(error, true)
      }
      // Before COMMIT nothing can have committed: roll back (a connection lost or given up on
      // is destroyed instead, and the server rolls the transaction back).
      if (broken === undefined) await this.#rollbackQuietly()
      if (error instanceof IdempotencyError && error.code === ErrorCode.TRANSACTION_ENDED) throw error
      const message = error instanceof Error ? error.message : String(error)
      throw new StoreUnavailableError(`The transaction did not commit (${message}); nothing of it was applied.`, {
        cause: error,
      })
    } finally {
      await this.#giveBack()
    }
  }

  async openStep(ref: OwnerRef, name: string): Promise<StepPoint> {
    this.#usable(name)
    const { stepPoint } = this.#statements
    const row = oneRow(stepPoint.name, await this.#stepSend(name, prepared(stepPoint, [ref.key, name])))
    const [wrote, isolation, committed, result] = row
    if (typeof isolation === 'string' && ISOLATION_LEVELS.has(isolation)) this.#isolation = isolation
    if (wrote === true) {
      throw new IdempotencyError(
        ErrorCode.STEP_MISUSED,
        `step "${name}": the transaction holds writes made through db outside a step since the last one (or the start): ` +
          'they would commit with this step and run again on a re-run. Write inside a step, or after the last step.',
      )
    }
    if (committed !== true) return { committed: false }
    return { committed: true, result: typeof result === 'string' ? result : null }
  }

  async commitStep(ref: OwnerRef, name: string, result: string | null): Promise<TransitionResult> {
    this.#usable(name)
    const { step } = this.#statements
    let answer: string
    try {
      const reply = await this.#session.send(prepared(step, stepValues(ref, name, result, this.#lockTimeoutMs)))
      answer = String(oneRow(step.name, reply)[0])
    } catch (error) {
      // Refused before COMMIT (the transaction aborted, a lock not had in time): nothing of the
      // step is kept; a connection lost is destroyed, which rolls it back too.
      await this.#restart(name, error)
      throw new StoreUnavailableError(`Step "${name}" did not commit (${messageOf(error)}); nothing of it was kept.`, {
        cause: error,
      })
    }
    if (answer !== TransitionReply.OK) {
      await this.#restart(name)
      const [kind, state] = answer.split(' ')
      if (kind === TransitionReply.WRONG_STATE) return { kind, state: state as RecordState }
      if (kind === TransitionReply.ALREADY) return { kind, rev: ref.rev }
      return { kind: kind === TransitionReply.NOT_OWNER ? kind : TransitionReply.NOT_FOUND }
    }
    try {
      const done = await this.#session.send(`COMMIT; ${this.#begin()}`)
      const first = Array.isArray(done) ? done[0] : done
      // COMMIT of a transaction an earlier error aborted answers ROLLBACK, not an error.
      if (first?.command !== undefined && first.command !== 'COMMIT') {
        throw new StoreUnavailableError(`PostgreSQL answered ${first.command} to the COMMIT of step "${name}".`)
      }
    } catch (error) {
      if (brokenBy(error) !== undefined && !(error instanceof StoreUnavailableError)) {
        // COMMIT was sent and its reply lost: the step may have committed. The connection is gone.
        this.#lose(name, error)
        await this.#giveBack()
        throw new StoreIndeterminateError(
          `The COMMIT of step "${name}" got no reply (${messageOf(error)}): it may have committed; a re-run finds its point if it did.`,
          { cause: error },
        )
      }
      // An ERROR at COMMIT (a deferred constraint, a serialization failure) rolled the step back.
      await this.#restart(name)
      throw error instanceof StoreUnavailableError
        ? error
        : new StoreUnavailableError(`Step "${name}" did not commit (${messageOf(error)}); nothing of it was kept.`, {
            cause: error,
          })
    }
    return { kind: TransitionReply.OK, rev: ref.rev }
  }

  async abandonStep(): Promise<void> {
    if (this.ended) return
    await this.#restart('(abandoned)')
  }

  /** The connection for a step, or why there is none. */
  #usable(name: string): Session {
    if (this.ended) {
      throw new StoreUnavailableError(
        this.#lost === undefined
          ? `step "${name}" after the run's transaction ended.`
          : `step "${name}": the transaction's connection was lost at the COMMIT of step "${this.#lost}".`,
      )
    }
    return this.#session
  }

  /** Sends a step's statement; a connection lost ends the transaction (nothing of it after the last step is kept). */
  async #stepSend(name: string, query: Parameters<Session['send']>[0]) {
    try {
      return await this.#session.send(query)
    } catch (error) {
      await this.#restart(name, error)
      throw new StoreUnavailableError(`Step "${name}" could not be opened (${messageOf(error)}).`, { cause: error })
    }
  }

  /** The run's next transaction's `BEGIN`, at the isolation level the last step found. */
  #begin(): string {
    return `BEGIN ISOLATION LEVEL ${this.#isolation.toUpperCase()}${this.#waits}`
  }

  /**
   * Rolls the current transaction back and begins the run's next one. When the connection is
   * broken (`error` not a server ERROR) or the ROLLBACK fails, the connection is destroyed
   * (the server rolls back) and the transaction has ended.
   */
  async #restart(name: string, error?: unknown): Promise<void> {
    const broken = error === undefined ? undefined : brokenBy(error)
    if (broken === undefined) {
      try {
        await this.#session.send(`ROLLBACK; ${this.#begin()}`)
        return
      } catch (failed) {
        this.#lose(name, failed)
      }
    } else {
      this.#lose(name, broken)
    }
    await this.#giveBack()
  }

  /** The connection is gone: destroyed when given back, and the transaction has ended. */
  #lose(name: string, error: unknown): void {
    this.#session.discard(error instanceof Error ? error : new Error(String(error)))
    this.#lost = name
    this.markEnded()
  }

  /** `touch()`'s statement, on the transaction's connection. */
  protected sendTouch(statement: string): Promise<unknown> {
    return this.#session.client.query(statement)
  }

  async rollback(): Promise<void> {
    if (this.ended) return
    this.markEnded()
    await this.#rollbackQuietly()
    await this.#giveBack()
  }

  /** ROLLBACK; when it fails the connection is destroyed, which rolls back too. */
  async #rollbackQuietly(): Promise<void> {
    try {
      await this.#session.send('ROLLBACK')
    } catch {
      this.#session.discard(new Error('ROLLBACK failed'))
    }
  }
}

/** The transactions of one store's runs: opened by `begin`, known to the renewals until they end. */
export class RunTransactions {
  readonly #connection: Connection
  readonly #statements: TransactionStatements
  readonly #settings: TransactionSettings
  /** The runs with a transaction open (`begin(run)`): key to attempt and transaction. */
  readonly #open = new Map<string, { readonly attempt: number; readonly transaction: RunTransaction }>()

  constructor(connection: Connection, statements: TransactionStatements, settings: TransactionSettings) {
    this.#connection = connection
    this.#statements = statements
    this.#settings = settings
  }

  /**
   * Opens a transaction for one run on a connection of its own (docs/design.md §6). The
   * connection stays checked out of the pool until the transaction ends.
   * @param run the scope the caller holds: its renewals move the lease in the leases table
   *   (`renewing`) while the transaction is open.
   * @param times the lease, the default of both bounded waits.
   * @throws StoreUnavailableError when no connection could be had or `BEGIN` failed (nothing
   *   can have happened either way).
   */
  begin(run?: OwnerRef, times?: Pick<RecordTimes, 'leaseMs'>): Promise<PostgresTransaction> {
    // Bounded waits (SET, not a query: the action may still choose its isolation level first).
    // A stale owner, paused or cut off mid-run, holds its row locks at most an idle lease: the
    // server then ends its session and the locks go, so the new owner, which may take over
    // only after a lease, waits for them about that long at most, and gives up after its own
    // lock_timeout instead of waiting without bound.
    const { lockTimeoutMs, idleTimeoutMs } = this.#waits(times)
    const waits = [
      ...(lockTimeoutMs === undefined ? [] : [`; SET LOCAL lock_timeout = ${lockTimeoutMs}`]),
      ...(idleTimeoutMs === undefined ? [] : [`; SET LOCAL idle_in_transaction_session_timeout = ${idleTimeoutMs}`]),
    ].join('')
    const begin = `BEGIN${waits}`
    return new Promise((opened, failed) => {
      let sent = false
      // The connection is held for the transaction's time: `withClient` gives it back once the
      // transaction ended (`giveBack`), and `commit` or `rollback` resolve only after that.
      const held: Promise<void> = this.#connection.withClient(async (session) => {
        sent = true
        await session.send(begin)
        let ended!: () => void
        const ending = new Promise<void>((resolve) => {
          ended = resolve
        })
        const transaction = new PostgresTransaction(
          session,
          this.#statements,
          this.#settings.lockTimeoutMs,
          waits,
          () => {
            if (run !== undefined) this.#forget(run.key, transaction)
            ended()
            return held
          },
        )
        if (run !== undefined) this.#open.set(run.key, { attempt: run.attempt, transaction })
        opened(transaction)
        await ending
      })
      held.catch((error: unknown) => {
        if (!sent) return failed(error)
        const message = error instanceof Error ? error.message : String(error)
        failed(
          new StoreUnavailableError(`The PostgreSQL store could not begin a transaction (${message}).`, {
            cause: error,
          }),
        )
      })
    })
  }

  /**
   * Opens a transaction for one run through the application's ORM (app-transaction.ts), with
   * the same bounded waits, renewals and completion as `begin`'s.
   */
  beginIn(app: AppTransactions, run?: OwnerRef, times?: Pick<RecordTimes, 'leaseMs'>): Promise<AppTransaction> {
    const { lockTimeoutMs, idleTimeoutMs } = this.#waits(times)
    const settings = {
      complete: this.#statements.complete,
      lockTimeoutMs: this.#settings.lockTimeoutMs,
      statementTimeoutMs: this.#settings.statementTimeoutMs,
      transactionLockTimeoutMs: lockTimeoutMs,
      transactionIdleTimeoutMs: idleTimeoutMs,
    }
    return beginAppTransaction(app, settings, (transaction) => {
      if (run === undefined) return () => {}
      this.#open.set(run.key, { attempt: run.attempt, transaction })
      return () => this.#forget(run.key, transaction)
    })
  }

  /** A run's bounded waits: the store's settings, else the lease. */
  #waits(times?: Pick<RecordTimes, 'leaseMs'>): { lockTimeoutMs?: number; idleTimeoutMs?: number } {
    const leaseMs = times?.leaseMs
    return {
      lockTimeoutMs: this.#settings.transactionLockTimeoutMs ?? leaseMs,
      idleTimeoutMs: this.#settings.transactionIdleTimeoutMs ?? leaseMs,
    }
  }

  /**
   * Whether the run of `ref` has a transaction of this store's open: its renewal then moves the
   * lease in the leases table (sql/002-functions.sql). The run is alive: its transaction's session is
   * told so (`touch`), so it is not idle (`transactionIdleTimeoutMs`).
   */
  renewing(ref: Pick<OwnerRef, 'key' | 'attempt'>): boolean {
    const open = this.#open.get(ref.key)
    if (open?.transaction.ended) this.#forget(ref.key, open.transaction)
    if (open === undefined || open.transaction.ended || open.attempt !== ref.attempt) return false
    open.transaction.touch()
    return true
  }

  /** `key`'s run no longer has `transaction` open (committing or rolling back counts as ended). */
  #forget(key: string, transaction: RunTransaction): void {
    if (this.#open.get(key)?.transaction === transaction) this.#open.delete(key)
  }
}
