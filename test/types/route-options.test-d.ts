import Fastify from 'fastify'
import type { Context } from 'hono'
import { describe, expectTypeOf, it } from 'vitest'
import expressIdempotency, { type ExpressIdempotencyRouteOptions } from '../../plugins/express/index.js'
import fastifyIdempotency, { type FastifyIdempotencyRouteOptions, memoryStore } from '../../plugins/fastify/index.js'
import honoIdempotency, { type HonoIdempotencyRouteOptions } from '../../plugins/hono/index.js'
import { Idempotent, type NestIdempotencyRouteOptions } from '../../plugins/nestjs/index.js'
import type { RouteOptions } from '../../src/http/route-options.js'

const secrets = { current: 1, keys: { 1: 'x'.repeat(32) } }

describe('route options on every framework', () => {
  it('refuses an unknown route option on Express, Hono and NestJS', () => {
    const express = expressIdempotency({ store: memoryStore(), secrets, anonymous: true })
    const hono = honoIdempotency({ store: memoryStore(), secrets, anonymous: true })
    // @ts-expect-error leaseMz is no route option
    express({ leaseMz: 5_000 })
    // @ts-expect-error leaseMz is no route option
    hono({ leaseMz: 5_000 })
    // @ts-expect-error leaseMz is no route option
    Idempotent({ leaseMz: 5_000 })
    express({ leaseMs: 5_000 })
    hono({ leaseMs: 5_000 })
    Idempotent({ leaseMs: 5_000 })
  })

  it('refuses an unknown route option on Fastify when the route config is checked as route options', () => {
    const app = Fastify()
    void app.register(fastifyIdempotency, { store: memoryStore(), secrets, anonymous: true })
    app.post(
      '/a',
      // @ts-expect-error leaseMz is no route option
      { config: { idempotency: { leaseMz: 5_000 } satisfies FastifyIdempotencyRouteOptions } },
      async () => 'a',
    )
    app.post(
      '/b',
      { config: { idempotency: { leaseMs: 5_000 } satisfies FastifyIdempotencyRouteOptions } },
      async () => 'b',
    )
  })

  it('refuses a route option of the wrong type on every framework', () => {
    const app = Fastify()
    const express = expressIdempotency({ store: memoryStore(), secrets, anonymous: true })
    const hono = honoIdempotency({ store: memoryStore(), secrets, anonymous: true })
    // @ts-expect-error inFlight takes 'reject' or { waitMs }
    app.post('/a', { config: { idempotency: { inFlight: 'wait' } } }, async () => 'a')
    // @ts-expect-error inFlight takes 'reject' or { waitMs }
    express({ inFlight: 'wait' })
    // @ts-expect-error inFlight takes 'reject' or { waitMs }
    hono({ inFlight: 'wait' })
    // @ts-expect-error inFlight takes 'reject' or { waitMs }
    Idempotent({ inFlight: 'wait' })
    // @ts-expect-error required is a boolean
    Idempotent({ required: 'yes' })
  })

  it('are the shared route options with each framework request in the fingerprint', () => {
    expectTypeOf<ExpressIdempotencyRouteOptions['leaseMs']>().toEqualTypeOf<RouteOptions<unknown>['leaseMs']>()
    expectTypeOf<HonoIdempotencyRouteOptions>().toEqualTypeOf<RouteOptions<Context>>()
    expectTypeOf<NestIdempotencyRouteOptions['inFlight']>().toEqualTypeOf<RouteOptions<unknown>['inFlight']>()
    expectTypeOf<FastifyIdempotencyRouteOptions['replayWindowMs']>().toEqualTypeOf<number | undefined>()
  })
})
