/**
 * Bounds of Redis's clock, read off a TIME sent with the fast claims (docs/design.md §6, "A claim
 * without a script"), so a duplicate of a running request can be answered IN_PROGRESS from the
 * record `SET ... NX GET` hands back, without claim.lua, and a new key's lease end reported
 * without asking Redis for the key's expiry.
 *
 * About once a second a claim sends `TIME` in the same write as its SET. Redis read its clock
 * (`at`) after the store read the local monotonic clock (`performance.now()`, `sentAt`) before
 * sending, and before the reply was read (`repliedAt`). So Redis's clock was at most
 * `aheadAtMost = at - sentAt` and at least `aheadAtLeast = at - repliedAt` ahead of the local
 * one. A later claim's SET ran before its reply arrived (local `repliedAt`), so Redis's time at
 * that SET was at most `aheadAtMost + repliedAt`; only that upper bound may say a lease is live
 * (a lower one would call live a lease that had already run out). It also ran after the claim
 * was sent, at least at `aheadAtLeast + sentAt`: that lower bound, plus the lease, is the lease
 * end an acquiring claim reports, never later than the true one while Redis's clock does not
 * step back (below).
 *
 * Nothing here reads the wall clock: a step of the local clock changes neither reading. What the
 * bounds cannot see is Redis's own clock stepping after the sample, until the next sample (a
 * TIME about once a second, or a new key's PEXPIRETIME): a step forward makes the upper bound
 * low, and a new sample past it replaces the kept one at once; a step back makes the lower bound
 * high, so a new key's lease end may be reported up to the step late until then (nothing in the
 * executor reads it). The sample's age limit bounds both, and docs/design.md §6 says why a lease
 * misjudged so only answers 409 where the script would have answered 503 or taken the record
 * over.
 */

/** How far ahead of the local monotonic clock Redis's clock was, at most and at least, and when that was read. */
export interface ClockSample {
  /** Redis epoch ms minus local `performance.now()` ms, at most. */
  readonly aheadAtMost: number
  /** Redis epoch ms minus local `performance.now()` ms, at least. */
  readonly aheadAtLeast: number
  /** The local monotonic time the sample was taken (its claim's reply). */
  readonly takenAt: number
}

/** A sample is not used once this old (ms): Redis's clock may have stepped since. */
export const SAMPLE_MAX_AGE_MS = 10_000

/** A tighter (lower) sample always replaces the kept one; any sample does once the kept one is this old (ms). */
export const SAMPLE_REFRESH_MS = 1_000

/**
 * The lease left (ms) the bound must show before a claim answers IN_PROGRESS without the
 * script: it covers the two clocks' rate difference over a sample's age (`MAX_DRIFT`: 10 ms in
 * 10 s) and the whole-millisecond times of the records, with room to spare; a lease closer to
 * its end goes to the script.
 */
export const LIVE_LEASE_MARGIN_MS = 50

/**
 * The sample a new one leaves kept: the one with the tighter upper bound while the kept one is
 * recent, else the new one. A new sample whose lower bound is past the kept one's upper bound
 * (more than the drift over the kept one's age) shows Redis's clock stepped forward since: the
 * kept bound is wrong, and the new one replaces it, however recent. A new sample that is not a
 * finite number keeps the old.
 * @param sentAt local monotonic ms read before the TIME was sent.
 * @param at Redis's epoch ms that TIME read.
 * @param repliedAt local monotonic ms once its reply arrived.
 */
export function nextSample(
  kept: ClockSample | undefined,
  sentAt: number,
  at: number,
  repliedAt: number,
): ClockSample | undefined {
  const aheadAtMost = at - sentAt
  if (!Number.isFinite(aheadAtMost) || !Number.isFinite(repliedAt) || repliedAt < sentAt) return kept
  const aheadAtLeast = at - repliedAt
  if (
    kept === undefined ||
    aheadAtMost <= kept.aheadAtMost ||
    repliedAt - kept.takenAt > SAMPLE_REFRESH_MS ||
    aheadAtLeast > kept.aheadAtMost + Math.ceil(Math.abs(repliedAt - kept.takenAt) * MAX_DRIFT)
  ) {
    return { aheadAtMost, aheadAtLeast, takenAt: repliedAt }
  }
  return kept
}

/**
 * Whether a claim should send the TIME that takes a new sample: none is kept, or the kept one is
 * older than `SAMPLE_REFRESH_MS` at local monotonic `now`.
 */
export function sampleDue(sample: ClockSample | undefined, now: number): boolean {
  return sample === undefined || !(now - sample.takenAt <= SAMPLE_REFRESH_MS)
}

/**
 * Redis's epoch ms at least, at any instant after local monotonic `sentAt` (a SET sent then ran
 * at this time or later), or undefined with no sample or one older than `SAMPLE_MAX_AGE_MS`.
 * The two clocks' rates may differ by `MAX_DRIFT` over the sample's age: that much is taken off,
 * so the bound stays below the truth.
 */
export function redisTimeAtLeast(sample: ClockSample | undefined, sentAt: number): number | undefined {
  if (sample === undefined) return undefined
  const age = Math.abs(sentAt - sample.takenAt)
  if (!(age <= SAMPLE_MAX_AGE_MS)) return undefined
  return sample.aheadAtLeast + sentAt - Math.ceil(age * MAX_DRIFT)
}

/**
 * The largest rate difference of the two clocks counted on: NTP slews each by at most 500 ppm,
 * so they part by at most 1,000 ppm (1 ms a second).
 */
export const MAX_DRIFT = 0.001

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
