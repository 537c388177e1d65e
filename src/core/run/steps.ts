/**
 * Recovery points (docs/design.md §6): `step(name, run)` of a run in a transaction of a store
 * that keeps them (`SteppedTransaction`, the PostgreSQL store's). A step runs `run(db)` in the
 * run's transaction and commits it there with its recovery point (its name and JSON result),
 * fenced by the owner's attempt; a re-run of the record (a takeover, a resumed claim, a retry
 * after a failure) finds the point and gets the result back without running the step again.
 * What the run writes after its last step commits with its answer, as without steps.
 */
import { ErrorCode, IdempotencyError } from '../errors.js'
import { TransitionReply } from '../record.js'
import type { OwnerRef } from '../store.js'
import { keepsSteps, type StoreTransaction, type TransactionClient } from '../store-transaction.js'

/**
 * Runs one step of the handler: `run(db)` committed in a transaction of its own with its
 * recovery point, or, when an earlier execution of the record committed it, its stored result
 * without running it. The result goes through JSON (the first execution gets what a re-run
 * would: a `Date` comes back as its string).
 */
export type Step = <R>(name: string, run: (db: TransactionClient) => R | Promise<R>) => Promise<R>

/** The `step` of a run without a transaction that keeps recovery points: it says what to configure. */
export function noStep(): Promise<never> {
  return Promise.reject(
    new IdempotencyError(
      ErrorCode.INVALID_OPTION,
      'step() needs a run in a transaction that keeps recovery points: transaction: true on the route ' +
        '(or execute({ transaction: true })) with the PostgreSQL store. The memory and Redis stores have no ' +
        'transactions; there, make each effect idempotent by itself (keyFor(name) for a downstream call).',
    ),
  )
}

/** The longest step name: it is stored with the record's key. */
const MAX_NAME = 200

/** The `step` of the run holding `hold` in `transaction` (`noStep` when it keeps no recovery points). */
export function stepper(transaction: StoreTransaction | undefined, hold: OwnerRef): Step {
  if (!keepsSteps(transaction)) return noStep
  const names = new Set<string>()
  let running: string | undefined
  return async function step<R>(name: string, run: (db: TransactionClient) => R | Promise<R>): Promise<R> {
    if (typeof name !== 'string' || name === '' || name.length > MAX_NAME) {
      throw new IdempotencyError(
        ErrorCode.INVALID_ARGUMENT,
        `step(name, run) takes a name of 1 to ${MAX_NAME} characters (e.g. 'reserve' or \`reserve:\${line.id}\`).`,
      )
    }
    if (typeof run !== 'function') {
      throw new IdempotencyError(ErrorCode.INVALID_ARGUMENT, `step("${name}", run): run must be a function of db.`)
    }
    if (running !== undefined) {
      misused(`step "${name}" started while step "${running}" runs: await each step before the next.`)
    }
    if (names.has(name)) {
      misused(
        `step "${name}" ran already in this run: give every step a name of its own (in a loop, \`${name}:\${id}\`).`,
      )
    }
    names.add(name)
    running = name
    try {
      const point = await transaction.openStep(hold, name)
      if (point.committed) return decode(point.result)
      let value: R
      try {
        value = await run(transaction.db)
      } catch (error) {
        await transaction.abandonStep()
        throw error
      }
      let text: string | null
      try {
        text = encode(name, value)
      } catch (error) {
        await transaction.abandonStep()
        throw error
      }
      const committed = await transaction.commitStep(hold, name, text)
      if (committed.kind !== TransitionReply.OK) {
        throw new IdempotencyError(
          ErrorCode.LEASE_LOST,
          `Step "${name}" was not committed (${committed.kind}): another execution of this request holds it now, ` +
            'or it ended. Nothing of the step was kept; stop the handler.',
        )
      }
      return decode(text)
    } finally {
      running = undefined
    }
  }
}

function misused(message: string): never {
  throw new IdempotencyError(ErrorCode.STEP_MISUSED, message)
}

/** A step's result as stored: JSON text, `null` for `undefined`. */
function encode(name: string, value: unknown): string | null {
  if (value === undefined) return null
  let text: string | undefined
  try {
    text = JSON.stringify(value)
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error)
    misused(`step "${name}" returned a value that is not JSON (${message}): return what a re-run can get back.`)
  }
  if (text === undefined) misused(`step "${name}" returned a ${typeof value}, which is not JSON.`)
  return text
}

function decode<R>(text: string | null): R {
  return (text === null ? undefined : JSON.parse(text)) as R
}
