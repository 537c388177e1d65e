/**
 * What every run's transaction on the PostgreSQL store shares, the store's own (transaction.ts)
 * and one opened through the application's ORM (app-transaction.ts): it ends once, and while it
 * is open the renewals tell the server the run is alive (`touch`).
 */
import { TransactionFront } from '../../core/store-front.js'

export abstract class RunTransaction extends TransactionFront {
  #ended = false

  /**
   * Whether the transaction ended (`commit` or `rollback` was called, or its connection was
   * lost): from then on the store sends nothing more in it.
   */
  get ended(): boolean {
    return this.#ended
  }

  /**
   * Tells the server the run is alive: a statement that neither reads nor writes (`SHOW`, no
   * snapshot, so the action may still set its isolation level) in the transaction, queued behind
   * the action's own statements. The store sends it with every renewal, so a live run's session
   * is never idle for long and only a stalled one meets `idle_in_transaction_session_timeout`.
   * Its answer, or error, is of no interest.
   */
  touch(): void {
    if (this.#ended) return
    try {
      this.sendTouch('SHOW lock_timeout').catch(ignore)
    } catch {
      // A connection (or an ORM's port) that cannot take it has failed the action's statements already.
    }
  }

  /** Sends `statement` in the transaction (its connection, or the ORM's port). */
  protected abstract sendTouch(statement: string): Promise<unknown>

  /** From now on the transaction has ended. */
  protected markEnded(): void {
    this.#ended = true
  }

  /**
   * `commit()`'s first step: from now on the transaction has ended.
   * @throws Error when it had ended already: a transaction is committed or rolled back once.
   */
  protected endOnce(): void {
    if (this.#ended) throw new Error('A transaction is committed or rolled back once.')
    this.#ended = true
  }
}

function ignore(): void {}
