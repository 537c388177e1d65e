import { describe, expect, it } from 'vitest'
import {
  type ClockSample,
  certainLeaseLeftMs,
  LIVE_LEASE_MARGIN_MS,
  nextSample,
  redisTimeAtMost,
  SAMPLE_MAX_AGE_MS,
  SAMPLE_REFRESH_MS,
} from '../../src/stores/redis/redis-clock.js'

// Redis's clock reads 1_000_000 + local; a claim sent at local 100 whose SET Redis ran at
// local 103 (Redis 1_000_103), its reply read at local 110.
const sample = nextSample(undefined, 100, 1_000_103, 110) as ClockSample

describe('redis-clock: an upper bound of Redis time', () => {
  it('bounds the offset with the time the acquiring SET was sent, and dates the sample by its reply', () => {
    expect(sample).toEqual({ aheadAtMost: 1_000_003, takenAt: 110 })
    // True offset 1_000_000 <= 1_000_003: an upper bound. From the reply's time it would be
    // 999_993, below the truth.
    expect(sample.aheadAtMost).toBeGreaterThanOrEqual(1_000_000)
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
    expect(tighter).toEqual({ aheadAtMost: 1_000_001, takenAt: 202 })
    const equal = nextSample(sample, 300, 1_000_303, 305)
    expect(equal).toEqual({ aheadAtMost: 1_000_003, takenAt: 305 })
    // The kept one is older than the refresh: the new one replaces it, however loose.
    const later = 110 + SAMPLE_REFRESH_MS + 1
    expect(nextSample(sample, later - 10, 1_000_000 + later + 40, later)).toEqual({
      aheadAtMost: 1_000_050,
      takenAt: later,
    })
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
