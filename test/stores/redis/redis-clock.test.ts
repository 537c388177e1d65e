import { describe, expect, it } from 'vitest'
import {
  type ClockSample,
  certainLeaseLeftMs,
  LIVE_LEASE_MARGIN_MS,
  MAX_DRIFT,
  nextSample,
  redisTimeAtLeast,
  redisTimeAtMost,
  SAMPLE_MAX_AGE_MS,
  SAMPLE_REFRESH_MS,
  sampleDue,
} from '../../../src/stores/redis/redis-clock.js'

// Redis's clock reads 1_000_000 + local; a TIME sent at local 100 that Redis ran at local 103
// (Redis 1_000_103), its reply read at local 110.
const sample = nextSample(undefined, 100, 1_000_103, 110) as ClockSample

describe('redis-clock: bounds of Redis time', () => {
  it('bounds the offset above with the time the TIME was sent and below with its reply, and dates the sample by the reply', () => {
    expect(sample).toEqual({ aheadAtMost: 1_000_003, aheadAtLeast: 999_993, takenAt: 110 })
    // True offset 1_000_000 lies between: 999_993 <= 1_000_000 <= 1_000_003.
    expect(sample.aheadAtMost).toBeGreaterThanOrEqual(1_000_000)
    expect(sample.aheadAtLeast).toBeLessThanOrEqual(1_000_000)
  })

  it("bounds Redis's time at a later SET from below with the time it was sent, less the drift over the sample's age", () => {
    // A SET sent at local 500 ran at local 500 or later: Redis 1_000_500 or later.
    const bound = redisTimeAtLeast(sample, 500) as number
    expect(bound).toBe(999_993 + 500 - Math.ceil(390 * MAX_DRIFT))
    expect(bound).toBeLessThanOrEqual(1_000_500)
    // Sent before the sample's reply (a claim of the same write): the same bound holds.
    expect(redisTimeAtLeast(sample, 105)).toBe(999_993 + 105 - 1)
    // Near the age limit the drift taken off is 10 ms.
    expect(redisTimeAtLeast(sample, 110 + SAMPLE_MAX_AGE_MS)).toBe(999_993 + 110 + SAMPLE_MAX_AGE_MS - 10)
  })

  it('gives no lower bound without a sample or with one older than the age limit', () => {
    expect(redisTimeAtLeast(undefined, 500)).toBeUndefined()
    expect(redisTimeAtLeast(sample, 110 + SAMPLE_MAX_AGE_MS + 1)).toBeUndefined()
    expect(redisTimeAtLeast(sample, Number.NaN)).toBeUndefined()
  })

  it('calls a sample due when there is none or once it is older than the refresh age', () => {
    expect(sampleDue(undefined, 0)).toBe(true)
    expect(sampleDue(sample, 110 + SAMPLE_REFRESH_MS)).toBe(false)
    expect(sampleDue(sample, 110 + SAMPLE_REFRESH_MS + 1)).toBe(true)
    expect(sampleDue(sample, Number.NaN)).toBe(true)
  })

  it("bounds Redis's time at a later claim's SET with the time its reply arrived", () => {
    // A SET Redis ran at local 500 (Redis 1_000_500), its reply at 505: the bound is above it.
    const bound = redisTimeAtMost(sample, 505) as number
    expect(bound).toBe(1_000_508)
    expect(bound).toBeGreaterThanOrEqual(1_000_500)
  })

  it('keeps the tighter sample while the kept one is recent, and a new one once it is old', () => {
    const looser = nextSample(sample, 200, 1_000_250, 260)
    expect(looser).toBe(sample)
    const tighter = nextSample(sample, 200, 1_000_201, 202)
    expect(tighter).toEqual({ aheadAtMost: 1_000_001, aheadAtLeast: 999_999, takenAt: 202 })
    const equal = nextSample(sample, 300, 1_000_303, 305)
    expect(equal).toEqual({ aheadAtMost: 1_000_003, aheadAtLeast: 999_998, takenAt: 305 })
    // The kept one is older than the refresh: the new one replaces it, however loose.
    const later = 110 + SAMPLE_REFRESH_MS + 1
    expect(nextSample(sample, later - 10, 1_000_000 + later + 40, later)).toEqual({
      aheadAtMost: 1_000_050,
      aheadAtLeast: 1_000_040,
      takenAt: later,
    })
  })

  it("drops a recent kept sample once a new one's lower bound is past its upper bound (Redis's clock stepped forward)", () => {
    // 200 ms after the kept sample, Redis's clock jumped 5 s: a claim's TIME (or a new key's
    // PEXPIRETIME) now reads 1_005_000 + local.
    const stepped = nextSample(sample, 300, 1_005_303, 310)
    expect(stepped).toEqual({ aheadAtMost: 1_005_003, aheadAtLeast: 1_004_993, takenAt: 310 })
    // The lease end a record wrote after the step, 2 s ahead on Redis's clock, is not called live
    // from the stale bound: the bound now sees the step.
    const leaseUntil = 1_005_000 + 320 - 100
    expect(certainLeaseLeftMs(leaseUntil, redisTimeAtMost(sample, 320))).toBeGreaterThan(0)
    expect(certainLeaseLeftMs(leaseUntil, redisTimeAtMost(stepped, 320))).toBeUndefined()
    // A looser sample whose lower bound stays within the kept upper bound (and the drift over
    // its age) is no step: the recent, tighter one stays.
    const loose = nextSample(sample, 500, 1_000_000 + 500 + 5, 600)
    expect(loose).toBe(sample)
  })

  it('ignores a sample that is not a number, or replied before it was sent', () => {
    expect(nextSample(sample, 200, Number.NaN, 210)).toBe(sample)
    expect(nextSample(sample, 200, 1_000_201, Number.POSITIVE_INFINITY)).toBe(sample)
    expect(nextSample(sample, 200, 1_000_201, 199)).toBe(sample)
    expect(nextSample(undefined, 200, Number.NaN, 210)).toBeUndefined()
  })

  it('gives no bound without a sample, with one older than the age limit, or one from later', () => {
    expect(redisTimeAtMost(undefined, 500)).toBeUndefined()
    expect(redisTimeAtMost(sample, 110 + SAMPLE_MAX_AGE_MS)).toBe(1_000_003 + 110 + SAMPLE_MAX_AGE_MS)
    expect(redisTimeAtMost(sample, 110 + SAMPLE_MAX_AGE_MS + 1)).toBeUndefined()
    expect(redisTimeAtMost(sample, 109)).toBeUndefined()
    expect(redisTimeAtMost(sample, Number.NaN)).toBeUndefined()
  })

  it('calls a lease certainly live only with the margin left by the upper bound', () => {
    expect(certainLeaseLeftMs(10_000, undefined)).toBeUndefined()
    expect(certainLeaseLeftMs(10_000 + LIVE_LEASE_MARGIN_MS, 10_000)).toBe(LIVE_LEASE_MARGIN_MS)
    expect(certainLeaseLeftMs(10_000 + LIVE_LEASE_MARGIN_MS - 1, 10_000)).toBeUndefined()
    expect(certainLeaseLeftMs(10_000, 10_000)).toBeUndefined()
    expect(certainLeaseLeftMs(9_000, 10_000)).toBeUndefined()
    expect(certainLeaseLeftMs(10_060, 10_000.5)).toBe(59)
    expect(certainLeaseLeftMs(Number.NaN, 10_000)).toBeUndefined()
  })
})
