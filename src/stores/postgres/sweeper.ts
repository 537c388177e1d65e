/**
 * The PostgreSQL store's sweeper: rounds of `sweepBatch`-row deletes of expired rows (claim and
 * inspect already treat them as absent: the sweeper only gives the space back), one instance at
 * a time per table (an advisory lock), each round bounded by `sweepBudgetMs`, the next after
 * `sweepIntervalMs`, or at once while it is behind.
 */
import type { Connection } from './connection.js'
import type { PostgresSettings } from './options.js'
import { decodeSwept, oneRow } from './rows.js'
import { lockKey, prepared, type Statement } from './statements.js'

/** The pause before the next round of a sweeper that is behind. */
const SWEEP_CATCH_UP_PAUSE_MS = 100

/** What one round did. */
interface Round {
  readonly deleted: number
  /** It ended on its budget with expired rows left. */
  readonly behind: boolean
  readonly elapsedMs: number
}

/** The sweeper of one store: `sweep()` on demand, and the timer's rounds. */
export class Sweeper {
  readonly #connection: Connection
  readonly #statement: Statement
  readonly #settings: PostgresSettings
  /** The table's qualified name, for messages. */
  readonly #table: string
  readonly #lock: string
  #timer: NodeJS.Timeout | undefined
  #failed = false
  /** The last round ended with expired rows left (`sweep-behind` reported). */
  #behind = false
  #stopped = false

  /** Starts the timer (unless `sweepIntervalMs` is 0). */
  constructor(connection: Connection, statement: Statement, settings: PostgresSettings) {
    this.#connection = connection
    this.#statement = statement
    this.#settings = settings
    this.#table = `${settings.schema}.${settings.table}`
    this.#lock = lockKey('sweep', settings.schema, settings.table)
    this.#schedule(settings.sweepIntervalMs)
  }

  /**
   * Deletes expired rows now (one round).
   * @returns the rows deleted, or -1 when another instance is sweeping this table right now.
   */
  async sweep(): Promise<number> {
    const round = await this.#round()
    return round === undefined ? -1 : round.deleted
  }

  /** Stops the timer: no round starts after this. */
  stop(): void {
    this.#stopped = true
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#timer = undefined
  }

  /**
   * One round: statements of `sweepBatch` rows until one deletes fewer (nothing left) or
   * `sweepBudgetMs` has passed (`behind`: expired rows remain). `undefined` when another
   * instance holds the sweep lock.
   */
  async #round(): Promise<Round | undefined> {
    const { sweepBatch, sweepBudgetMs } = this.#settings
    const started = performance.now()
    let deleted = 0
    for (let statement = 0; ; statement++) {
      const reply = await this.#connection.query(prepared(this.#statement, [sweepBatch, this.#lock]))
      const n = decodeSwept(oneRow(this.#statement.name, reply))
      const elapsedMs = Math.round(performance.now() - started)
      if (n === -1) return statement === 0 ? undefined : { deleted, behind: false, elapsedMs }
      deleted += n
      if (n < sweepBatch) return { deleted, behind: false, elapsedMs }
      if (elapsedMs >= sweepBudgetMs) return { deleted, behind: true, elapsedMs }
    }
  }

  /** The timer's round, then the next one: after `sweepIntervalMs`, or at once when behind. */
  async #timedRound(): Promise<void> {
    const { emit, sweepIntervalMs } = this.#settings
    let behind = false
    try {
      const round = await this.#round()
      this.#failed = false
      if (round !== undefined && round.deleted > 0) {
        const { deleted, elapsedMs } = round
        emit({ type: 'swept', message: `Deleted ${deleted} expired rows from ${this.#table}.`, deleted })
        behind = round.behind
        if (behind && !this.#behind) {
          emit({
            type: 'sweep-behind',
            message:
              `The sweep of ${this.#table} deleted ${deleted} expired rows in ${elapsedMs} ms (sweepBudgetMs) and ` +
              'expired rows remain: expired records arrive faster than one round per sweepIntervalMs removes them. ' +
              'The next round starts at once; raise sweepBatch or sweepBudgetMs, or lower sweepIntervalMs.',
            deleted,
            elapsedMs,
          })
        }
      }
      this.#behind = behind
    } catch (error) {
      if (!this.#failed) {
        this.#failed = true
        emit({
          type: 'sweep-failed',
          message: `Sweeping expired rows from ${this.#table} failed: ${error instanceof Error ? error.message : String(error)}`,
          error,
        })
      }
    } finally {
      // Behind: a short pause only, so the database serves claims between rounds too.
      this.#schedule(behind ? Math.min(sweepIntervalMs, SWEEP_CATCH_UP_PAUSE_MS) : sweepIntervalMs)
    }
  }

  #schedule(delayMs: number): void {
    if (this.#stopped || this.#settings.sweepIntervalMs === 0) return
    this.#timer = setTimeout(() => void this.#timedRound(), delayMs)
    // The sweeper never keeps the process alive.
    this.#timer.unref()
  }
}
