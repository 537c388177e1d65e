/**
 * The claim without a script against a Redis whose wall clock steps 5 s, by an
 * `LD_PRELOAD` shim (test/helpers/clock-shift.c, built by test/helpers/clock-shim.ts) that
 * adds the milliseconds in a file to every wall-clock read of redis-server. A running record's
 * lease that ran out by Redis's stepped clock must not be called live from the store's stale
 * bound once a new key's PEXPIRETIME has shown the step: the duplicate then goes to the script.
 * After a step back, a new key's reported lease end (from the kept sample) may be late by up to
 * the step until the next sample replaces the kept one (docs/design.md §6, "Why the reported
 * lease end is safe"), and never later than the true one after it.
 */
import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ClaimReply } from '../../../src/core/record.js'
import { redisStore } from '../../../src/stores/redis/index.js'
import { SAMPLE_REFRESH_MS } from '../../../src/stores/redis/redis-clock.js'
import { buildClockShim, type ClockShim } from '../../helpers/clock-shim.js'
import { claimRequest } from '../../helpers/stores.js'
import { redisFixture } from './fixture.js'

describe('the Redis claim without a script when Redis’s clock steps', () => {
  let shim: ClockShim
  let redis: Redis
  let probe: Redis

  // Registered before the fixture's hooks, so it runs after the server has stopped.
  afterAll(() => {
    shim.remove()
  })

  // The server's wall clock reads the shim, built here before the server starts.
  const server = redisFixture({
    server: () => {
      shim = buildClockShim(0)
      return { env: { ...shim.env } }
    },
    startTimeoutMs: 60_000,
  })

  beforeAll(async () => {
    redis = await server.ready()
    probe = server.client()
  })

  it('the shim steps the server’s clock', async () => {
    shim.set(0)
    const [before] = (await probe.time()) as unknown as [string]
    shim.set(5000)
    const [after] = (await probe.time()) as unknown as [string]
    shim.set(0)
    expect(Number(after) - Number(before)).toBeGreaterThanOrEqual(4)
  })

  it('a duplicate of a lease that ran out by the stepped clock goes to the script once a new key showed the step', async () => {
    // Each round must run the step and the duplicates within one sample's refresh (1 s), with
    // no TIME sample due meanwhile (one would show the step by itself); a loaded machine may need
    // another round.
    let answered: string | undefined
    for (let round = 0; round < 10 && answered === undefined; round++) {
      shim.set(0)
      const store = redisStore({ redis, onEvent: () => undefined })
      const held = claimRequest(store, { leaseMs: 2_000, failureRetentionMs: 60_000, replayWindowMs: 60_000 })
      const started = performance.now()
      expect((await store.claim(held)).kind).toBe(ClaimReply.ACQUIRED)
      // Let the TIME sent with that claim answer; then a duplicate finds the record running.
      await new Promise((resolve) => setTimeout(resolve, 50))
      const live = await store.claim({ ...held, owner: claimRequest(store).owner })
      expect(live.kind).toBe(ClaimReply.IN_PROGRESS)
      shim.set(5000)
      // A new key, claimed while duplicates come: its PEXPIRETIME goes behind its SET.
      expect((await store.claim(claimRequest(store))).kind).toBe(ClaimReply.ACQUIRED)
      await new Promise((resolve) => setTimeout(resolve, 20))
      // Sent before the kept sample (taken at the first claim's TIME reply) is due again.
      const inTime = performance.now() - started < SAMPLE_REFRESH_MS - 100
      const again = await store.claim({ ...held, owner: claimRequest(store).owner })
      await store.close()
      if (inTime) answered = again.kind
    }
    shim.set(0)
    expect(answered, 'no round ran within one sample refresh').toBeDefined()
    // claim.lua finds the EXECUTING lease run out (recover): not the 409 of a live lease.
    expect(answered).toBe(ClaimReply.RECOVERY_REQUIRED)
  }, 120_000)

  it('after a step back, a new key’s lease end is at most the step late, and not late once the next sample came', async () => {
    const times = { leaseMs: 30_000, failureRetentionMs: 60_000, replayWindowMs: 60_000 }
    /** How much later than Redis's own (the key's expiry, read back) a new key's reported lease end is. */
    const lateness = async (store: ReturnType<typeof redisStore>): Promise<number> => {
      const request = claimRequest(store, times)
      const claim = await store.claim(request)
      if (claim.kind !== ClaimReply.ACQUIRED) throw new Error(`claim answered ${claim.kind}`)
      const expireTime = Number(await probe.pexpiretime(request.key))
      return claim.leaseUntil - (expireTime + 1 - times.failureRetentionMs)
    }
    // Each round must claim the late key within one sample's refresh (1 s) of the sample, with
    // no TIME sent meanwhile; a loaded machine may need another round.
    let late: number | undefined
    let after: number | undefined
    for (let round = 0; round < 10 && late === undefined; round++) {
      shim.set(0)
      const store = redisStore({ redis, onEvent: () => undefined })
      const started = performance.now()
      // The first claim sends TIME: the kept sample, before the step.
      expect(await lateness(store)).toBeLessThanOrEqual(0)
      shim.set(-5000)
      const stepped = await lateness(store)
      const inTime = performance.now() - started < SAMPLE_REFRESH_MS - 100
      if (inTime) {
        late = stepped
        // Past the refresh, the next claim sends TIME with its SET: the new sample replaces the kept one.
        await new Promise((resolve) => setTimeout(resolve, SAMPLE_REFRESH_MS + 100))
        await lateness(store)
        after = await lateness(store)
      }
      await store.close()
    }
    shim.set(0)
    expect(late, 'no round ran within one sample refresh').toBeDefined()
    // Reported from the sample taken before the step: late, by the step at most.
    expect(late).toBeGreaterThan(4_000)
    expect(late).toBeLessThanOrEqual(5_000)
    // From the sample taken after it: never later than Redis's own.
    expect(after).toBeLessThanOrEqual(0)
  }, 120_000)
})
