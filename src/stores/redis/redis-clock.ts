/**
 * An upper bound of Redis's clock, read off the fast claims' own replies (docs/design.md §6,
 * "A claim without a script"), so a duplicate of a running request can be answered IN_PROGRESS
 * from the record `SET ... NX GET` hands back, without claim.lua.
 *
 * Each fast claim that acquires a new key learns Redis's time at its SET exactly: the key's
 * expiry (PEXPIRETIME) less the PX it sent. That SET ran after the claim read the local
 * monotonic clock (`performance.now()`) before sending it, so Redis's clock was then at most
 * `offset = setAt - sentAt` ahead of the local one. A later claim's SET ran before its reply
 * arrived (local `repliedAt`), so Redis's time at that SET was at most `offset + repliedAt`.
 * Only that upper bound may say a lease is live: a lower one (the reply's time in the offset,
 * the send's time for the claim) would call live a lease that had already run out.
 *
 * Nothing here reads the wall clock: a step of the local clock changes neither reading. What the
 * bound cannot see is Redis's own clock stepping forward after the sample; the sample's age
 * limit bounds that, and docs/design.md §6 says why a lease misjudged so only answers 409 where
 * the script would have answered 503 or taken the record over.
 */

/** How far ahead of the local monotonic clock Redis's clock was at most, and when that was read. */
export interface ClockSample {
  /** Redis epoch ms minus local `performance.now()` ms, at most. */
  readonly aheadAtMost: number
  /** The local monotonic time the sample was taken (its claim's reply). */
  readonly takenAt: number
}

/** A sample is not used once this old (ms): Redis's clock may have stepped since. */
export const SAMPLE_MAX_AGE_MS = 10_000

/** A tighter (lower) sample always replaces the kept one; any sample does once the kept one is this old (ms). */
export const SAMPLE_REFRESH_MS = 1_000

/**
 * The lease left (ms) the bound must show before a claim answers IN_PROGRESS without the
 * script: it covers the two clocks' rate difference over a sample's age (NTP slews at most
 * 500 ppm: 5 ms in 10 s) and Redis's whole-millisecond times, with room to spare; a lease closer
 * to its end goes to the script.
 */
export const LIVE_LEASE_MARGIN_MS = 50

/**
 * The sample a new one leaves kept: the tighter of the two while the kept one is recent, else
 * the new one. A new sample that is not a finite number keeps the old.
 * @param sentAt local monotonic ms read before the acquiring SET was sent.
 * @param setAt Redis's epoch ms at that SET (PEXPIRETIME less the PX).
 * @param repliedAt local monotonic ms once its reply arrived.
 */
export function nextSample(
  kept: ClockSample | undefined,
  sentAt: number,
  setAt: number,
  repliedAt: number,
): ClockSample | undefined {
  const aheadAtMost = setAt - sentAt
  if (!Number.isFinite(aheadAtMost) || !Number.isFinite(repliedAt) || repliedAt < sentAt) return kept
  if (kept === undefined || aheadAtMost <= kept.aheadAtMost || repliedAt - kept.takenAt > SAMPLE_REFRESH_MS) {
    return { aheadAtMost, takenAt: repliedAt }
  }
  return kept
}

/**
 * Redis's epoch ms at most, at any instant before local monotonic `repliedAt`; undefined with
 * no sample, or one older than `SAMPLE_MAX_AGE_MS` (or from after `repliedAt`, which a monotonic
 * clock never gives).
 */
export function redisTimeAtMost(sample: ClockSample | undefined, repliedAt: number): number | undefined {
  if (sample === undefined) return undefined
  const age = repliedAt - sample.takenAt
  if (!(age >= 0 && age <= SAMPLE_MAX_AGE_MS)) return undefined
  return sample.aheadAtMost + repliedAt
}

/**
 * The lease left (whole ms) on a lease ending at Redis epoch ms `leaseUntil`, when it was
 * certainly at least `LIVE_LEASE_MARGIN_MS` at Redis's time `redisAtMost` or earlier; undefined
 * otherwise (no bound, or a lease near or past its end: the script decides).
 */
export function certainLeaseLeftMs(leaseUntil: number, redisAtMost: number | undefined): number | undefined {
  if (redisAtMost === undefined || !Number.isFinite(leaseUntil)) return undefined
  const left = Math.floor(leaseUntil - redisAtMost)
  return left >= LIVE_LEASE_MARGIN_MS ? left : undefined
}
