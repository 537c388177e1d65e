/**
 * Which answers `idempotentFetch` retries, and after how long (docs/across-services.md, "The
 * client"): the server's `x-should-retry` first, then the status rules. Pure functions of a
 * response's status and headers (and, for a 503 without the header, its problem code).
 */

/** The verdict on one answer: give it to the caller, or send the request again. */
export type Verdict =
  | { readonly retry: false }
  /** `afterMs`: the server's `Retry-After`, when it gave one; else the client's backoff. */
  | { readonly retry: true; readonly afterMs: number | undefined }

const FINAL: Verdict = Object.freeze({ retry: false })

/**
 * Statuses retried when the server does not say: the request was not processed (408, 425,
 * 429), is being processed by an earlier send (409), or may not have reached the handler or may
 * resume there (500, 502, 503, 504). 503 recovery-required is not: retrying cannot settle it.
 */
const RETRIED = new Set([408, 409, 425, 429, 500, 502, 503, 504])

/** The problem code of idemkit's 503 that no retry can fix (docs/errors.md). */
export const RECOVERY_REQUIRED_CODE = 'IDEMPOTENCY_RECOVERY_REQUIRED'

/**
 * The verdict on an answer.
 * @param problemCode the `code` of a problem+json body, read only for a 503 without
 *   `x-should-retry` (see `needsProblemCode`).
 * @param now `Date.now()`, for a `Retry-After` given as an HTTP-date.
 */
export function verdict(status: number, headers: Headers, problemCode: string | undefined, now: number): Verdict {
  const should = headers.get('x-should-retry')
  if (should === 'false') return FINAL
  if (should !== 'true') {
    if (!RETRIED.has(status)) return FINAL
    if (status === 503 && problemCode === RECOVERY_REQUIRED_CODE) return FINAL
  }
  return { retry: true, afterMs: retryAfterMs(headers.get('retry-after'), now) }
}

/** Whether `verdict` needs the body's problem code: a 503 problem with no `x-should-retry`. */
export function needsProblemCode(status: number, headers: Headers): boolean {
  if (status !== 503) return false
  const should = headers.get('x-should-retry')
  if (should === 'true' || should === 'false') return false
  return /^application\/problem\+json\b/i.test(headers.get('content-type') ?? '')
}

/**
 * `Retry-After` in milliseconds (RFC 9110 §10.2.3): delay-seconds or an HTTP-date; `undefined`
 * when absent or unreadable. A date in the past is 0.
 */
export function retryAfterMs(value: string | null, now: number): number | undefined {
  if (value === null) return undefined
  const text = value.trim()
  if (/^\d+$/.test(text)) return Number(text) * 1000
  const at = Date.parse(text)
  if (Number.isNaN(at)) return undefined
  return Math.max(0, at - now)
}

/**
 * The pause before retry number `retry` (1 for the first) without a `Retry-After`: exponential
 * from `initialMs`, at most `maxMs`, with equal jitter (half fixed, half random), so a crowd of
 * clients that failed together does not come back together.
 */
export function backoffMs(retry: number, initialMs: number, maxMs: number, random: () => number): number {
  const ceiling = Math.min(maxMs, initialMs * 2 ** Math.min(retry - 1, 30))
  return Math.round(ceiling / 2 + (random() * ceiling) / 2)
}
