/**
 * Issue 22: media types are case-insensitive (RFC 9110 §8.3.1). The Hono example read a body
 * only when Content-Type started with the lowercase `application/json`, so `APPLICATION/JSON`
 * got 400 "body must be object" where the other examples created the order. Every example
 * now answers the same.
 */
import { randomUUID } from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import { memoryStore } from '../../src/index.js'
import { ADAPTERS, authHeaders, type RunningApp, send } from '../helpers/adapters.js'

describe.each(ADAPTERS)('the %s example', (_name, adapter) => {
  let app: RunningApp | undefined

  afterEach(async () => {
    await app?.close()
  })

  it.each(['APPLICATION/JSON', 'Application/Json; charset=UTF-8'])(
    'creates an order, and replays it, with Content-Type %s',
    async (contentType) => {
      app = await adapter.example(memoryStore())
      const headers = { ...authHeaders('alice', randomUUID()), 'content-type': contentType }

      const first = await send(app, 'POST', '/orders', { headers, body: { item: 'book', qty: 1 } })
      const retry = await send(app, 'POST', '/orders', { headers, body: { item: 'book', qty: 1 } })

      expect(first.status).toBe(201)
      expect(first.json()).toMatchObject({ item: 'book', qty: 1 })
      expect(retry.status).toBe(201)
      expect(retry.headers.get('idempotent-replayed')).toBe('true')
      expect(retry.text).toBe(first.text)
    },
  )
})
