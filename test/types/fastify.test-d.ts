import Fastify from 'fastify'
import { describe, expectTypeOf, it } from 'vitest'
import idempotency, { type IdempotencyInfo, type IdempotencyStore, memoryStore } from '../../plugins/fastify/index.js'
import type { ClaimRequest, ClaimResult, InspectResult, RenewResult, TransitionResult } from '../../src/index.js'

describe('Fastify augmentation', () => {
  it('accepts idempotency in route config as true or route options', () => {
    const app = Fastify()
    app.register(idempotency, {
      store: memoryStore(),
      secrets: { current: 1, keys: { 1: 'x'.repeat(32) } },
      anonymous: true,
    })
    app.post('/a', { config: { idempotency: true } }, async () => 'a')
    app.post(
      '/b',
      { config: { idempotency: { leaseMs: 5_000, expiredExecution: 'takeover', operation: 'b' } } },
      async () => 'b',
    )
    // @ts-expect-error expiredExecution takes 'recover' or 'takeover' only
    app.post('/c', { config: { idempotency: { expiredExecution: 'retry' } } }, async () => 'c')
    // @ts-expect-error leaseMs is a number
    app.post('/d', { config: { idempotency: { leaseMs: '5s' } } }, async () => 'd')
  })

  it('decorates the request with idempotency info or null', () => {
    const app = Fastify()
    app.post('/x', async (request) => {
      expectTypeOf(request.idempotency).toEqualTypeOf<IdempotencyInfo | null>()
      if (request.idempotency) {
        expectTypeOf(request.idempotency.fencingToken).toBeNumber()
        expectTypeOf(request.idempotency.signal).toEqualTypeOf<AbortSignal>()
        expectTypeOf(request.idempotency.replayed).toBeBoolean()
        expectTypeOf(request.idempotency.digest).toBeString()
      }
      return 'x'
    })
  })

  it('requires store and secrets in the plugin options', () => {
    const app = Fastify()
    // @ts-expect-error store and secrets are required
    app.register(idempotency, { anonymous: true })
  })
})

describe('custom stores', () => {
  it('can be implemented against the exported interface', () => {
    const store: IdempotencyStore = {
      name: 'custom',
      keyPrefix: 'custom',
      claim: async (_request: ClaimRequest): Promise<ClaimResult> => ({ kind: 'FINGERPRINT_MISMATCH' }),
      start: async (): Promise<TransitionResult> => ({ kind: 'NOT_FOUND' }),
      complete: async (): Promise<TransitionResult> => ({ kind: 'NOT_FOUND' }),
      markFailed: async (): Promise<TransitionResult> => ({ kind: 'NOT_FOUND' }),
      release: async (): Promise<TransitionResult> => ({ kind: 'NOT_FOUND' }),
      renew: async (): Promise<RenewResult> => ({ kind: 'NOT_FOUND' }),
      inspect: async (): Promise<InspectResult> => ({ kind: 'ABSENT' }),
      close: async () => {},
    }
    expectTypeOf(store).toMatchTypeOf<IdempotencyStore>()
  })
})
