/**
 * `keyFor(name)` on every framework's request view (Fastify `request.idempotency`, Express
 * `req.idempotency`, Hono `c.get('idempotency')`, NestJS `@IdempotencyInfo()`): the key derived
 * from the request's scope under the current secret, the same for the same name, another for
 * another caller, key or name.
 */
import { randomUUID } from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import { derivedKey } from '../../src/core/derived-key.js'
import { parseSecrets, scopeDigest } from '../../src/core/scope.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { ADAPTERS, authHeaders, type RunningApp, send } from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'

const secrets = parseSecrets({ current: 1, keys: { 1: SECRET } })

function expected(user: string, key: string, name: string, format?: 'uuid'): string {
  const digest = scopeDigest(secrets, 1, { principal: `Bearer ${user}`, key, operation: 'POST /keyed' })
  return derivedKey(secrets, 1, digest, name, format && { format })
}

describe.each(ADAPTERS)('keyFor on %s', (_name, adapter) => {
  let app: RunningApp | undefined

  afterEach(async () => {
    await app?.close()
    app = undefined
  })

  it('derives the downstream keys of the request\u2019s scope, per caller, key and name', async () => {
    let runs = 0
    app = await adapter.custom(memoryStore(), [
      {
        path: '/keyed',
        reply: ({ idempotency }) => {
          runs++
          const info = idempotency as NonNullable<typeof idempotency>
          const { keyFor } = info
          const body = {
            charge: info.keyFor('charge'),
            again: keyFor('charge'),
            line: info.keyFor('charge:line-7'),
            uuid: info.keyFor('charge', { format: 'uuid' }),
          }
          return { status: 201, headers: { 'content-type': 'application/json' }, chunks: [JSON.stringify(body)] }
        },
      },
    ])
    const key = randomUUID()
    const post = (user: string, k: string) =>
      send(app as RunningApp, 'POST', '/keyed', { headers: authHeaders(user, k), body: {} })

    const alice = await post('alice', key)
    const bob = await post('bob', key)
    const otherKey = randomUUID()
    const aliceOther = await post('alice', otherKey)
    const replay = await post('alice', key)

    expect(alice.status).toBe(201)
    expect(alice.json()).toEqual({
      charge: expected('alice', key, 'charge'),
      again: expected('alice', key, 'charge'),
      line: expected('alice', key, 'charge:line-7'),
      uuid: expected('alice', key, 'charge', 'uuid'),
    })
    expect(bob.json().charge).toBe(expected('bob', key, 'charge'))
    expect(aliceOther.json().charge).toBe(expected('alice', otherKey, 'charge'))
    expect(new Set([alice.json().charge, bob.json().charge, aliceOther.json().charge]).size).toBe(3)
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(replay.body.equals(alice.body)).toBe(true)
    expect(runs).toBe(3)
  })
})
