/**
 * Why an execution failed, as its FAILED_RETRYABLE or ABANDONED record keeps it (`markFailed`),
 * for an operator's `idemkit inspect` (docs/operations.md "What a failed record keeps"): the
 * failure's class always, a message only where idemkit wrote it. A handler's own error keeps
 * its class alone: its message may carry the request's data (an amount, an e-mail address), and
 * the record outlives the request by `failureRetentionMs`.
 */
import { IdempotencyError } from './errors.js'
import type { Settled } from './outcomes.js'
import { RecordState } from './record.js'

/** Why an execution failed: bounded, on one line, never the request's data. */
export interface FailureCause {
  /**
   * The failure's class: an idemkit error's code (`ERR_IDEM_STORE_UNAVAILABLE`); a thrown
   * error's class name, with its string `code` in brackets (`TypeError`, `Error [ECONNRESET]`);
   * `HTTP <status>` for an answer the classifier called a failure; or what the layer knows
   * (`deadline`, `transaction`). At most `CAUSE_CLASS_CHARS` characters.
   */
  readonly class: string
  /**
   * What happened, in idemkit's own words (its errors' messages and the layer's): at most
   * `CAUSE_MESSAGE_CHARS` characters, one line. Absent for a handler's error.
   */
  readonly message?: string
}

/** The longest class a record keeps, in characters. */
export const CAUSE_CLASS_CHARS = 100
/** The longest message a record keeps, in characters. */
export const CAUSE_MESSAGE_CHARS = 200

/** `text` on one line (every run of control characters one space), cut to `max` characters with `…`. */
function line(text: string, max: number): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it removes
  const one = text.replace(/[\u0000-\u001f\u007f\u2028\u2029]+/g, ' ').trim()
  return one.length <= max ? one : `${one.slice(0, max - 1)}…`
}

/** `cause` within the bounds: class and message on one line and cut; undefined when it has no class. */
export function boundCause(cause: FailureCause | undefined): FailureCause | undefined {
  if (cause === undefined) return undefined
  const kind = line(cause.class, CAUSE_CLASS_CHARS)
  if (kind === '') return undefined
  const message = cause.message === undefined ? '' : line(cause.message, CAUSE_MESSAGE_CHARS)
  return message === '' ? { class: kind } : { class: kind, message }
}

const CODE = /^[A-Z][A-Z0-9_]{1,63}$/

/** A thrown value's class, and idemkit's own message: never a handler's message. */
export function causeOfError(error: unknown): FailureCause {
  if (error instanceof IdempotencyError) return { class: error.code, message: error.message }
  if (error instanceof Error) {
    const constructed = (error.constructor as { name?: unknown } | undefined)?.name
    // `class PaymentDeclined extends Error {}` keeps the name 'Error': its constructor names it.
    const name =
      error.name !== 'Error' || typeof constructed !== 'string' || constructed === '' ? error.name : constructed
    const code = (error as { code?: unknown }).code
    return { class: typeof code === 'string' && CODE.test(code) ? `${name} [${code}]` : name }
  }
  return { class: error === null ? 'null' : `thrown ${typeof error}` }
}

/**
 * The cause of a settled run that is recorded as failed: the thrown error's, or, for a result
 * the classifier called a failure, `HTTP <status>` when it is an HTTP response the adapters
 * captured (with the error a framework answered it for).
 */
export function causeOfSettled(settled: Settled<unknown>): FailureCause {
  if (!settled.ok) return causeOfError(settled.error)
  const value = settled.value as { status?: unknown; error?: unknown } | null | undefined
  const status = typeof value === 'object' && value !== null ? value.status : undefined
  if (typeof status !== 'number') return { class: 'result' }
  const error = value?.error
  if (error === undefined || error === null) return { class: `HTTP ${status}` }
  const cause = causeOfError(error)
  return { ...cause, class: `${cause.class}, HTTP ${status}` }
}

/** Causes the layer knows, where nothing of the handler's is involved. */
export const LayerCause = {
  /** A claim won after the claim deadline, given back: the handler did not run. */
  DEADLINE: { class: 'deadline', message: 'the claim was won after the claim deadline; the handler did not run' },
  /**
   * A claim answered only after its lease could have run out (its reply read more than a lease
   * after it was sent: a stalled event loop, a slow network) whose renewal then failed, given
   * back: the handler did not run.
   */
  LATE_CLAIM: {
    class: 'late-claim',
    message:
      'the claim was answered after its lease could have run out and could not be renewed; the handler did not run',
  },
  /** A claim whose answer was lost, found holding the scope later and given back: the handler did not run. */
  UNDECIDED_CLAIM: {
    class: 'undecided-claim',
    message: 'a claim whose answer was lost landed after the executor gave up on it; the handler did not run',
  },
} as const satisfies Readonly<Record<string, FailureCause>>

/** The cause as a failed record keeps it (every store: where a completed record keeps its response). */
export function encodeCause(cause: FailureCause): Buffer {
  return Buffer.from(
    JSON.stringify(cause.message === undefined ? { c: cause.class } : { c: cause.class, m: cause.message }),
  )
}

/** A failed record's cause from its bytes; undefined for none (a record written before causes were kept) or bytes that are not one. */
export function decodeCause(bytes: Buffer): FailureCause | undefined {
  if (bytes.byteLength === 0 || bytes[0] !== 0x7b) return undefined
  try {
    const parsed = JSON.parse(bytes.toString('utf8')) as { c?: unknown; m?: unknown }
    if (typeof parsed.c !== 'string') return undefined
    return boundCause(typeof parsed.m === 'string' ? { class: parsed.c, message: parsed.m } : { class: parsed.c })
  } catch {
    return undefined
  }
}

/** The states whose records keep a cause. */
function failed(state: RecordState): boolean {
  return state === RecordState.FAILED_RETRYABLE || state === RecordState.ABANDONED
}

/** A record's cause from the bytes where a completed record keeps its response: only a failed record has one. */
export function storedCause(state: RecordState, bytes: Buffer | null | undefined): FailureCause | undefined {
  return bytes !== null && bytes !== undefined && failed(state) ? decodeCause(bytes) : undefined
}

/** The bytes a record keeps for `cause` where a completed one keeps its response: undefined unless failed with a cause. */
export function causeBytes(record: { readonly state: RecordState; readonly cause?: FailureCause }): Buffer | undefined {
  return record.cause !== undefined && failed(record.state) ? encodeCause(record.cause) : undefined
}
