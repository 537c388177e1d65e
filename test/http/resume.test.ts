/**
 * `resume: true` over real HTTP on every store: a handler that throws an error not marked
 * retryable leaves its key ABANDONED, and the retry re-runs it at once (the next fencing token)
 * with the same `keyFor` values, answers 201 and stores that answer; the same route without
 * `resume` answers the retry 503 recovery-required.
 */
import { randomUUID } from 'node:crypto'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { ADAPTERS, authHeaders, type RunningApp, send, type TestReply } from '../helpers/adapters.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const adapters = ADAPTERS.filter(([name]) => name === 'fastify' || name === 'express')

describe.each(STORES)('resume: true on the %s store', (_store, create) => {
  let backing: TestStore
  let app: RunningApp | undefined

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await app?.close()
    app = undefined
    await backing.teardown()
  })

  it.each(adapters)(
    '%s: the retry after a thrown error re-runs the handler with the same derived keys',
    async (_name, adapter) => {
      /** What each run saw: its fencing token and its derived key for the charge. */
      const runs: { route: string; token: number; charge: string }[] = []
      const handler =
        (route: string) =>
        ({
          idempotency,
        }: {
          idempotency: { fencingToken: number; keyFor(name: string): string } | null
        }): TestReply => {
          const info = idempotency as NonNullable<typeof idempotency>
          const run = { route, token: info.fencingToken, charge: info.keyFor('charge') }
          runs.push(run)
          // The first run of each key falls over after its charge, with an error not marked retryable.
          if (runs.filter((seen) => seen.route === route).length % 2 === 1)
            throw new Error('fell over after the charge')
          return {
            status: 201,
            headers: { 'content-type': 'application/json' },
            chunks: [JSON.stringify({ charge: run.charge, token: run.token })],
          }
        }
      app = await adapter.custom(backing.store, [
        { path: '/checkout', options: { resume: true }, reply: handler('/checkout') },
        { path: '/recover', reply: handler('/recover') },
      ])
      const key = randomUUID()
      const post = (path: string) =>
        send(app as RunningApp, 'POST', path, { headers: authHeaders('alice', key), body: { item: 'book' } })

      const thrown = await post('/checkout')
      const resumed = await post('/checkout')
      const replayed = await post('/checkout')

      expect(thrown.status).toBe(500)
      expect(resumed.status).toBe(201)
      const [first, second] = runs
      expect(first?.token).toBe(1)
      expect(second?.token).toBe(2)
      expect(second?.charge).toBe(first?.charge)
      expect(resumed.json()).toEqual({ charge: first?.charge, token: 2 })
      expect(replayed.status).toBe(201)
      expect(replayed.headers.get('idempotent-replayed')).toBe('true')
      expect(replayed.body.equals(resumed.body)).toBe(true)
      expect(runs).toHaveLength(2)

      // Without resume, the same fall leaves the key to an operator.
      expect((await post('/recover')).status).toBe(500)
      const refused = await post('/recover')
      expect(refused.status).toBe(503)
      expect(refused.json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
      expect(runs).toHaveLength(3)
    },
  )
})
