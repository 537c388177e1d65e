/**
 * Redis commands per request through the Fastify plugin. Every claim starts with a SET NX GET:
 * a first execution adds the completion's script (two round trips), a replay and a 422 are
 * answered from the record the SET hands back (one), and so is a 409, with the PEXPIRETIME that
 * dates the running lease (behind the SET while duplicates keep coming: one round trip; after it
 * otherwise: two). About once a second a TIME goes in the same write as a claim's SET, to bound
 * Redis's clock; it is counted on its own. An unannotated route sends nothing. Counted from what
 * Redis saw, not timed.
 */
import Fastify, { type FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import idempotency from '../../plugins/fastify/index.js'
import { redisStore } from '../../src/stores/redis/index.js'
import { SAMPLE_REFRESH_MS } from '../../src/stores/redis/redis-clock.js'
import { sleep } from '../helpers/executor-harness.js'
import { type RedisMonitor, redisMonitor } from '../helpers/redis-monitor.js'
import { testRedisClient } from '../helpers/stores.js'

/**
 * Counts the commands clients sent (MONITOR shows script-internal commands with the source
 * "lua"; those are not round trips and are left out). A marker ECHO sent after the request
 * tells when everything before it has been seen.
 */
class CommandCounter {
  private seen: string[] = []
  private marker = 0
  private waiting: { marker: string; resolve: () => void } | undefined

  constructor(
    monitor: RedisMonitor,
    private readonly control: Redis,
  ) {
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      if (source === 'lua') return
      const name = (args[0] ?? '').toLowerCase()
      const waiting = this.waiting
      if (name === 'echo' && waiting !== undefined && args[1] === waiting.marker) {
        waiting.resolve()
        return
      }
      this.seen.push(name)
    })
  }

  /**
   * Commands seen since the last call, by name, without the TIME that samples Redis's clock
   * about once a second (`takeWithTime` counts it).
   */
  async take(): Promise<Record<string, number>> {
    const { time: _time, ...counts } = await this.takeWithTime()
    return counts
  }

  /** Commands seen since the last call, by name. */
  async takeWithTime(): Promise<Record<string, number>> {
    const marker = `count-marker-${++this.marker}`
    const done = new Promise<void>((resolve) => {
      this.waiting = { marker, resolve }
    })
    await this.control.echo(marker)
    await done
    const counts: Record<string, number> = {}
    for (const name of this.seen) counts[name] = (counts[name] ?? 0) + 1
    this.seen = []
    return counts
  }
}

const total = (counts: Record<string, number>) => Object.values(counts).reduce((a, b) => a + b, 0)

describe('Redis commands per request', () => {
  let app: FastifyInstance
  let client: Redis
  let control: Redis
  let monitor: RedisMonitor
  let stats: CommandCounter

  beforeAll(async () => {
    client = testRedisClient()
    control = testRedisClient()
    monitor = await redisMonitor(inject('redisUrl'))
    stats = new CommandCounter(monitor, control)
    await client.flushall()
    app = Fastify()
    await app.register(idempotency, {
      store: redisStore({ redis: client, keyPrefix: 'count' }),
      secrets: { current: 1, keys: { 1: 'c'.repeat(32) } },
      anonymous: true,
    })
    app.post('/op', { config: { idempotency: true } }, async (request) => ({ echo: request.body }))
    app.post('/slow', { config: { idempotency: true } }, async () => {
      await sleep(300)
      return 'slow'
    })
    app.post('/plain', async () => 'plain')
    await app.ready()
    // Warm up: load every script once, so NOSCRIPT reloads are not counted below.
    const warm = (key: string, url = '/op', payload: object = { a: 1 }) =>
      app.inject({ method: 'POST', url, headers: { 'idempotency-key': key }, payload })
    await warm('warm')
    await warm('warm')
    await warm('warm', '/op', { a: 2 })
    await stats.take()
  })

  afterAll(async () => {
    await app?.close()
    client.disconnect()
    control.disconnect()
    monitor.disconnect()
  })

  const post = (key: string | undefined, url = '/op', payload: object = { a: 1 }) =>
    app.inject({
      method: 'POST',
      url,
      headers: key === undefined ? {} : { 'idempotency-key': key },
      payload,
    })

  it('sends exactly 2 commands in 2 round trips for a first execution: the SET, then one script', async () => {
    const response = await post('first')

    expect(response.statusCode).toBe(200)
    expect(await stats.take()).toEqual({ set: 1, fcall: 1 })
  })

  it("sends a TIME with a claim's SET once the clock sample is due, and none with the claims right after", async () => {
    await post('timed')
    await sleep(SAMPLE_REFRESH_MS + 50)
    await stats.takeWithTime()

    const replay = await post('timed')
    const due = await stats.takeWithTime()
    const first = await post('timed-next')
    const after = await stats.takeWithTime()

    expect(replay.headers['idempotent-replayed']).toBe('true')
    expect(due).toEqual({ time: 1, set: 1 })
    expect(first.statusCode).toBe(200)
    expect(after).toEqual({ set: 1, fcall: 1 })
  })

  it('sends exactly 1 command for a replay, with no script', async () => {
    await post('replay')
    await stats.take()

    const response = await post('replay')

    expect(response.headers['idempotent-replayed']).toBe('true')
    expect(await stats.take()).toEqual({ set: 1 })
  })

  it('sends exactly 1 command for a 422, with no script', async () => {
    await post('mismatch')
    await stats.take()

    const response = await post('mismatch', '/op', { a: 2 })

    expect(response.statusCode).toBe(422)
    expect(await stats.take()).toEqual({ set: 1 })
  })

  it('sends exactly 2 commands for a 409, with no script: the SET that finds the key running and the PEXPIRETIME that dates its lease (behind the SET from the second duplicate on)', async () => {
    const running = post('busy', '/slow')
    await sleep(100)
    await stats.take()

    // The first duplicate reads the key's expiry once the SET has handed the record back; the
    // store's next claims send it behind their SET, in the same round trip.
    const first = await post('busy', '/slow')
    const firstCounted = await stats.take()
    const second = await post('busy', '/slow')
    const secondCounted = await stats.take()
    await running
    await stats.take() // the first request's completion, not the duplicates'

    for (const response of [first, second]) {
      expect(response.statusCode).toBe(409)
      expect(Number(response.headers['retry-after'])).toBeGreaterThanOrEqual(1)
    }
    expect(firstCounted).toEqual({ set: 1, pexpiretime: 1 })
    expect(secondCounted).toEqual({ set: 1, pexpiretime: 1 })
  })

  it("sends no script for a 409 that is another instance's first claim: the TIME that goes with its SET bounds Redis's clock", async () => {
    // Another instance on its own client, which has sent nothing yet.
    const otherClient = testRedisClient()
    const other = Fastify()
    await other.register(idempotency, {
      store: redisStore({ redis: otherClient, keyPrefix: 'count' }),
      secrets: { current: 1, keys: { 1: 'c'.repeat(32) } },
      anonymous: true,
    })
    other.post('/slow', { config: { idempotency: true } }, async () => 'never')
    await other.ready()
    try {
      const running = post('other-busy', '/slow')
      await sleep(100)
      await stats.takeWithTime()

      const response = await other.inject({
        method: 'POST',
        url: '/slow',
        headers: { 'idempotency-key': 'other-busy' },
        payload: { a: 1 },
      })
      const counted = await stats.takeWithTime()
      await running
      await stats.take()

      expect(response.statusCode).toBe(409)
      expect(counted).toEqual({ time: 1, set: 1, pexpiretime: 1 })
    } finally {
      await other.close()
      otherClient.disconnect()
    }
  })

  it('sends no command for an unannotated route', async () => {
    const response = await post('ignored', '/plain')

    expect(response.body).toBe('plain')
    expect(total(await stats.take())).toBe(0)
  })
})
