/**
 * A Fastify app with the plugin on a store (the example app's secret; the principal is the
 * `Authorization` header's value), and a POST /orders sent to it through `inject`, for tests
 * that add their own route.
 */
import Fastify, { type FastifyInstance, type LightMyRequestResponse } from 'fastify'
import fastifyIdempotency, { type FastifyIdempotencyOptions } from '../../plugins/fastify/index.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { SECRET } from './example-app.js'

/** The app, with the plugin registered and `options` on top of the defaults; add routes to it. */
export async function pluginApp(
  store: IdempotencyStore,
  options: Partial<FastifyIdempotencyOptions> = {},
): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(fastifyIdempotency, {
    store,
    secrets: { current: 1, keys: { 1: SECRET } },
    principal: (request) => request.headers.authorization,
    ...options,
  } as FastifyIdempotencyOptions)
  return app
}

/** POST /orders with `key` as alice, a JSON body. */
export function postOrder(
  app: FastifyInstance,
  key: string,
  payload: object = { item: 'book' },
): Promise<LightMyRequestResponse> {
  return app.inject({
    method: 'POST',
    url: '/orders',
    headers: { authorization: 'alice', 'idempotency-key': key, 'content-type': 'application/json' },
    payload,
  })
}
