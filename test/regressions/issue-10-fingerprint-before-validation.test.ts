/**
 * Issue 10, item 1: the fingerprint was taken of the body after validation had rewritten it.
 * Fastify's Ajv removes unknown members, coerces types and fills in defaults in place before
 * `preHandler`, and an Express validator may assign a converted body back to `req.body`; then a
 * different request with the same key replayed the first answer. The fingerprint must be of what
 * the client sent (docs/design.md §2: only key order and whitespace normalised): a different body is 422.
 */
import { randomUUID } from 'node:crypto'
import express from 'express'
import Fastify, { type FastifyInstance } from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { idempotency as expressIdempotency } from '../../plugins/express/index.js'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { ADAPTERS, type Adapter, authHeaders, type RunningApp, send } from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const secrets = { current: 1, keys: { 1: SECRET } }

/** Sends `bodies` in order with one key; returns "status[ replay]" per answer. */
async function answers(app: RunningApp, path: string, bodies: readonly string[]): Promise<string[]> {
  const key = randomUUID()
  const out: string[] = []
  for (const body of bodies) {
    const response = await send(app, 'POST', path, { headers: authHeaders('alice', key), body })
    out.push(`${response.status}${response.headers.get('idempotent-replayed') === 'true' ? ' replay' : ''}`)
  }
  return out
}

async function listenFastify(app: FastifyInstance): Promise<RunningApp> {
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return { url: `http://127.0.0.1:${port}`, port, logs: [], close: async () => void (await app.close()) }
}

describe.each(STORES)('the fingerprint is of the body the client sent, on the %s store', (_name, create) => {
  let backing: TestStore | undefined
  let app: RunningApp | undefined

  afterEach(async () => {
    await app?.close()
    await backing?.teardown()
    app = undefined
    backing = undefined
  })

  describe.each(ADAPTERS)('the %s example app', (_adapterName, adapter: Adapter) => {
    it.each([
      ['an unknown member that validation removes', '{"item":"a","qty":1,"note":"x"}'],
      ['a string that validation coerces to a number', '{"item":"a","qty":"1"}'],
      ['an array that validation coerces to its element', '{"item":["a"],"qty":1}'],
    ])('answers 422 or 400, never a replay, for the same key with %s', async (_case, other) => {
      backing = await create()
      app = await adapter.example(backing.store)

      const got = await answers(app, '/orders', ['{"item":"a","qty":1}', other, '{ "qty": 1, "item": "a" }'])

      expect(got[0]).toBe('201')
      expect(['422', '400']).toContain(got[1])
      expect(got[2]).toBe('201 replay')
    })
  })

  describe('Fastify with Ajv options that rewrite the body', () => {
    async function fastifyApp(customOptions: Record<string, unknown>, body: object): Promise<RunningApp> {
      backing = await create()
      const fastify = Fastify({ ajv: { customOptions } })
      await fastify.register(fastifyIdempotency, {
        store: backing.store,
        secrets,
        principal: (request) => request.headers.authorization,
      })
      fastify.post('/r', { config: { idempotency: true }, schema: { body } }, async (request, reply) =>
        reply.code(201).send({ got: request.body }),
      )
      return listenFastify(fastify)
    }

    it('answers 422 for a member that removeAdditional drops', async () => {
      app = await fastifyApp(
        { removeAdditional: 'all', coerceTypes: false, useDefaults: false },
        { type: 'object', properties: { item: { type: 'string' } } },
      )

      const got = await answers(app, '/r', ['{"item":"a"}', '{"item":"a","note":"x"}', '{"item":"a"}'])

      expect(got).toEqual(['201', '422', '201 replay'])
    })

    it('answers 422 for a value that coerceTypes converts', async () => {
      app = await fastifyApp(
        { removeAdditional: false, coerceTypes: true, useDefaults: false },
        { type: 'object', properties: { qty: { type: 'integer' } } },
      )

      const got = await answers(app, '/r', ['{"qty":1}', '{"qty":"1"}', '{"qty":true}', '{"qty":1}'])

      expect(got).toEqual(['201', '422', '422', '201 replay'])
    })

    it('answers 422 for the explicit value of a member that useDefaults fills in', async () => {
      app = await fastifyApp(
        { removeAdditional: false, coerceTypes: false, useDefaults: true },
        { type: 'object', properties: { item: { type: 'string' }, note: { type: 'string', default: 'none' } } },
      )

      const got = await answers(app, '/r', ['{"item":"a"}', '{"item":"a","note":"none"}', '{"item":"a"}'])

      expect(got).toEqual(['201', '422', '201 replay'])
    })
  })

  describe('Express with a validator that assigns a converted body', () => {
    it('answers 422 for a member the validator strips and a value it coerces, with captureBody after the parser', async () => {
      backing = await create()
      const server = express()
      const idem = expressIdempotency({ store: backing.store, secrets, principal: (req) => req.headers.authorization })
      const order = z.object({ item: z.string(), qty: z.coerce.number().int() })
      server.use(express.json(), idem.captureBody)
      server.post(
        '/r',
        (req, res, next) => {
          const parsed = order.safeParse(req.body)
          if (!parsed.success) return void res.status(400).json({ error: 'invalid' })
          req.body = parsed.data // strips unknown members, "1" -> 1
          next()
        },
        idem(),
        (req, res) => void res.status(201).json({ got: req.body }),
      )
      server.use(idem.errors)
      app = await new Promise<RunningApp>((resolve) => {
        const listening = server.listen(0, '127.0.0.1', () => {
          const address = listening.address()
          const port = typeof address === 'object' && address !== null ? address.port : 0
          resolve({
            url: `http://127.0.0.1:${port}`,
            port,
            logs: [],
            close: () => new Promise<void>((done) => listening.close(() => done())),
          })
        })
      })

      const got = await answers(app, '/r', [
        '{"item":"a","qty":1}',
        '{"item":"a","qty":1,"note":"x"}',
        '{"item":"a","qty":"1"}',
        '{"item":["a"],"qty":1}',
        '{"qty":1,"item":"a"}',
      ])

      expect(got).toEqual(['201', '422', '422', '400', '201 replay'])
    })
  })
})
