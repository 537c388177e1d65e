/**
 * A run's transaction opened by the application's ORM (`transaction: <adapter>`, docs/design.md
 * §6, docs/postgresql.md "With an ORM"): the ORM begins and commits its own transaction on a
 * connection of its own, and the store sends its statements into it through the adapter's port
 * (`TransactionPort`). The rules are those of transaction.ts's transaction:
 *
 * | step | through the port |
 * | --- | --- |
 * | begin (inside the ORM's callback, before the action) | one `SELECT set_config(...)`: the bounded waits (`lock_timeout`, `idle_in_transaction_session_timeout`, the lease by default) and the run's mark (`idemkit.run`), all local to the transaction |
 * | `commit(ref, response, times)` | the completion (`_complete_v3`, the same owner, attempt and rev check), which fails when the mark is gone (the action ended the transaction itself); on OK the ORM's callback returns and the ORM sends `COMMIT`; any other answer rolls back and is returned |
 * | `rollback()` | the ORM's callback rejects: the ORM sends `ROLLBACK`. Never rejects |
 * | `touch()` | `SHOW lock_timeout`, queued behind the action's statements, with each lease renewal |
 *
 * The store's own connection is not the ORM's: it cannot destroy it. A completion with no reply
 * within `statementTimeoutMs` is given up on and the ORM's transaction told to roll back (COMMIT
 * was never sent, so nothing commits); a COMMIT with no answer in that time is indeterminate (the
 * executor inspects the record).
 */
import { ErrorCode, IdempotencyError, StoreIndeterminateError, StoreUnavailableError } from '../../core/errors.js'
import { TransitionReply } from '../../core/record.js'
import type { OwnerRef, RecordTimes, TransitionResult } from '../../core/store.js'
import type { AppTransactions, TransactionPort } from '../../core/store-transaction.js'
import { postgresFault } from './faults.js'
import { decodeComplete, oneRow } from './rows.js'
import { RunTransaction } from './run-transaction.js'
import { completeValues, type Statement } from './statements.js'

/** What an application's transaction needs of the store. */
export interface AppTransactionSettings {
  /** The completion (`_complete_v3`); its last parameter is its own `lock_timeout`. */
  readonly complete: Statement
  /** The completion's own `lock_timeout`. */
  readonly lockTimeoutMs: number
  /** How long the completion and the ORM's COMMIT are waited for. */
  readonly statementTimeoutMs: number
  /** The transaction's `lock_timeout`, if any. */
  readonly transactionLockTimeoutMs: number | undefined
  /** The transaction's `idle_in_transaction_session_timeout`, if any. */
  readonly transactionIdleTimeoutMs: number | undefined
}

/** The transaction-local setting that marks the run's transaction; gone once it ended. */
const MARK = 'idemkit.run'
/** Read (and missing) only when the mark is gone: the completion then fails before it runs. */
const ENDED = 'idemkit.transaction_ended'

/** The reason a run's ORM callback rejects with to have the ORM roll back. */
class RollBack extends Error {
  constructor() {
    super('The run rolled back its transaction.')
  }
}

/**
 * The completion as sent through the port: the complete function, whose `lock_timeout`
 * argument is read only while the run's mark is set, so once the transaction ended (a COMMIT or
 * ROLLBACK of the action's own) it fails with an ERROR before it runs.
 */
export function guardedCompletion(complete: Statement): string {
  const last = '$7)'
  if (!complete.text.endsWith(last)) throw new Error(`Unexpected completion statement: ${complete.text}`)
  return `${complete.text.slice(0, -last.length)}CASE current_setting('${MARK}', true) WHEN 'on' THEN $7::integer ELSE current_setting('${ENDED}')::integer END)`
}

/** The first statement in the ORM's transaction: its bounded waits and the run's mark. */
function beginStatement(settings: AppTransactionSettings): { text: string; values: unknown[] } {
  const values: unknown[] = []
  const set = (name: string, value: string) => {
    values.push(value)
    return `set_config('${name}', $${values.length}, true)`
  }
  const parts = [set(MARK, 'on')]
  if (settings.transactionLockTimeoutMs !== undefined) {
    parts.push(set('lock_timeout', String(settings.transactionLockTimeoutMs)))
  }
  if (settings.transactionIdleTimeoutMs !== undefined) {
    parts.push(set('idle_in_transaction_session_timeout', String(settings.transactionIdleTimeoutMs)))
  }
  return { text: `SELECT ${parts.join(', ')}`, values }
}

/**
 * One run's transaction in the application's ORM. The action writes through `tx`; `commit()`
 * writes the completion through the port, then lets the ORM commit.
 */
export class AppTransaction extends RunTransaction {
  readonly db = undefined
  override readonly tx: unknown
  readonly #port: TransactionPort
  readonly #settings: AppTransactionSettings
  readonly #completion: string
  /** Ends the ORM's callback: resolve commits, reject rolls back. */
  readonly #end: { resolve(): void; reject(reason: Error): void }
  /** The ORM's transaction, settled once its COMMIT or ROLLBACK is answered. */
  readonly #settled: () => Promise<unknown>
  readonly #forget: () => void

  constructor(
    tx: unknown,
    port: TransactionPort,
    settings: AppTransactionSettings,
    end: { resolve(): void; reject(reason: Error): void },
    settled: () => Promise<unknown>,
    forget: () => void,
  ) {
    super()
    this.tx = tx
    this.#port = port
    this.#settings = settings
    this.#completion = guardedCompletion(settings.complete)
    this.#end = end
    this.#settled = settled
    this.#forget = forget
  }

  protected async doCommit(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult> {
    this.#stop()
    const { complete, lockTimeoutMs, statementTimeoutMs } = this.#settings
    let result: TransitionResult
    try {
      const values = completeValues(ref, response, times, lockTimeoutMs)
      const reply = await within(this.#port.query(this.#completion, values), statementTimeoutMs)
      result = decodeComplete(oneRow(complete.name, { rows: reply.rows.map((row) => Object.values(row)) }))
    } catch (error) {
      // COMMIT was not sent: nothing can have committed.
      await this.#rollBack()
      if (mentions(error, ENDED)) {
        throw new IdempotencyError(
          ErrorCode.TRANSACTION_ENDED,
          'The action ended its transaction itself (COMMIT or ROLLBACK through idempotency.tx): ' +
            'its writes may have been committed without the record.',
          { cause: error },
        )
      }
      throw new StoreUnavailableError(
        `The transaction did not commit (${messageOf(error)}); nothing of it was applied.`,
        { cause: error },
      )
    }
    if (result.kind !== TransitionReply.OK) {
      // Not this run's record any more: nothing of the action's writes is kept.
      await this.#rollBack()
      return result
    }
    this.#end.resolve()
    try {
      await within(this.#settled(), statementTimeoutMs)
    } catch (error) {
      // An ERROR answered to COMMIT (a deferred constraint, a serialization failure) rolled it
      // back; a COMMIT with no answer, or a connection lost, may have committed.
      const fault = postgresFault(databaseError(error) ?? error, true)
      if (fault instanceof StoreUnavailableError) {
        throw new StoreUnavailableError(`PostgreSQL refused the COMMIT (${messageOf(error)}); it rolled back.`, {
          cause: error,
        })
      }
      throw fault
    }
    return result
  }

  /** `touch()`'s statement, through the port. */
  protected sendTouch(statement: string): Promise<unknown> {
    return this.#port.query(statement, [])
  }

  async rollback(): Promise<void> {
    if (this.ended) return
    this.#stop()
    await this.#rollBack()
  }

  /** Ends the transaction (once: a second `commit` throws) and drops it from the renewals. */
  #stop(): void {
    this.endOnce()
    this.#forget()
  }

  /** Has the ORM roll back and waits for it, at most `statementTimeoutMs`; never rejects. */
  async #rollBack(): Promise<void> {
    this.#end.reject(new RollBack())
    await within(this.#settled(), this.#settings.statementTimeoutMs).catch(ignore)
  }
}

/**
 * Opens a run's transaction through the application's ORM and resolves once the ORM's callback
 * runs with the bounded waits set.
 * @param track registers the open transaction for the run's renewals; returns its removal.
 * @throws StoreUnavailableError when the ORM could not begin, or the first statement failed
 *   (nothing can have happened either way).
 */
export function beginAppTransaction(
  app: AppTransactions,
  settings: AppTransactionSettings,
  track: (transaction: AppTransaction) => () => void,
): Promise<AppTransaction> {
  const begin = beginStatement(settings)
  return new Promise((opened, failed) => {
    let transaction: AppTransaction | undefined
    let settled: Promise<unknown> = Promise.resolve()
    const body = async (tx: unknown, port: TransactionPort): Promise<void> => {
      await port.query(begin.text, begin.values)
      let end!: { resolve(): void; reject(reason: Error): void }
      const ending = new Promise<void>((resolve, reject) => {
        end = { resolve, reject }
      })
      let forget: () => void = ignore
      const current = new AppTransaction(
        tx,
        port,
        settings,
        end,
        () => settled,
        () => forget(),
      )
      transaction = current
      forget = track(current)
      opened(current)
      await ending
    }
    try {
      settled = app.run(body)
    } catch (error) {
      settled = Promise.reject(error)
    }
    settled.catch((error: unknown) => {
      if (transaction !== undefined) return
      failed(
        new StoreUnavailableError(`The ${app.name} transaction could not begin (${messageOf(error)}).`, {
          cause: error,
        }),
      )
    })
  })
}

/** `promise`, or a rejection with StoreIndeterminateError after `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new StoreIndeterminateError(
            `PostgreSQL did not answer within ${ms} ms (statementTimeoutMs); the call may or may not have been ` +
              'applied: inspect the record to find out.',
          ),
        ),
      ms,
    )
  })
  return Promise.race([promise, late]).finally(() => clearTimeout(timer))
}

/** The server's ERROR behind an ORM's wrapping of it (its `cause` chain), if any. */
function databaseError(error: unknown): unknown {
  for (let seen = error, depth = 0; seen !== undefined && seen !== null && depth < 5; depth++) {
    const fields = seen as { severity?: unknown; code?: unknown; cause?: unknown }
    if (fields.severity === 'ERROR' && typeof fields.code === 'string') return seen
    seen = fields.cause
  }
  return undefined
}

/** Whether `text` appears in the message of `error` or of an error in its `cause` chain. */
function mentions(error: unknown, text: string): boolean {
  for (let seen = error, depth = 0; seen !== undefined && seen !== null && depth < 5; depth++) {
    if (messageOf(seen).includes(text)) return true
    seen = (seen as { cause?: unknown }).cause
  }
  return false
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}

function ignore(): void {}
