/**
 * The contract in @fastify/swagger's document (plugins/fastify/openapi.ts): every protected route
 * of the example app gains the Idempotency-Key header parameter (as required as the route says,
 * with its length and pattern), the status and replay headers on its answers, and the 400, 401,
 * 409, 422 and 503 application/problem+json responses, all referring to one problem schema;
 * unprotected routes are untouched, the document passes an OpenAPI 3 validator, and it makes no
 * difference whether @fastify/swagger is registered before or after the plugin. The answers
 * themselves do not change: a request without its key is still the layer's own 400 problem.
 */
import { readFileSync } from 'node:fs'
import swagger from '@fastify/swagger'
import Fastify, { type FastifyInstance } from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import { buildExampleApp } from '../../examples/fastify-app.js'
import idempotency from '../../plugins/fastify/index.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { SECRET } from '../helpers/example-app.js'
import {
  type Doc,
  KEY_SCHEMA,
  keyParameter,
  type Operation,
  PROBLEM_PROPERTIES,
  PROBLEM_STATUSES,
  validated,
} from '../helpers/openapi.js'

/** The operation's problem responses all refer to one schema: its name. */
function problemRef(operation: Operation): string {
  const refs = new Set(
    PROBLEM_STATUSES.map((status) => operation.responses[status]?.content?.['application/problem+json']?.schema.$ref),
  )
  expect(refs.size).toBe(1)
  return [...refs][0] as string
}

describe('the example app on Fastify documented by @fastify/swagger', () => {
  let app: FastifyInstance

  afterEach(async () => {
    await app.close()
  })

  async function document(): Promise<Doc> {
    app = await buildExampleApp({ store: memoryStore(), secret: SECRET, paymentsUrl: 'http://127.0.0.1:9' })
    const response = await app.inject({ method: 'GET', url: '/openapi.json' })
    expect(response.statusCode).toBe(200)
    return response.json() as Doc
  }

  it('documents every protected route and passes an OpenAPI 3 validator', async () => {
    const doc = await document()

    await validated(doc)
    const protectedOperations = [
      doc.paths['/orders']?.post,
      doc.paths['/checkouts']?.post,
      doc.paths['/accounts/{id}/deposits']?.post,
      doc.paths['/webhooks/stripe']?.post,
      doc.paths['/webhooks/github']?.post,
    ]
    const refs = new Set<string>()
    for (const operation of protectedOperations) {
      expect(operation).toBeDefined()
      const op = operation as Operation
      for (const status of PROBLEM_STATUSES) {
        const response = op.responses[status]
        expect(Object.keys(response?.content ?? {})).toEqual(['application/problem+json'])
        expect(Object.keys(response?.headers ?? {})).toEqual(
          expect.arrayContaining(['Idempotency-Status', 'x-should-retry']),
        )
      }
      expect(Object.keys(op.responses['409']?.headers ?? {})).toContain('Retry-After')
      refs.add(problemRef(op))
    }
    // One shared problem schema, with the layer's codes.
    expect(refs.size).toBe(1)
    const name = ([...refs][0] as string).replace('#/components/schemas/', '')
    expect(doc.components.schemas[name]?.title).toBe('IdempotencyProblem')
    expect(Object.keys(doc.components.schemas[name]?.properties ?? {})).toEqual(PROBLEM_PROPERTIES)
  })

  it('gives the header routes their Idempotency-Key parameter, and the answers their status headers', async () => {
    const doc = await document()

    for (const path of ['/orders', '/checkouts', '/accounts/{id}/deposits']) {
      expect(keyParameter(doc.paths[path]?.post)).toEqual({
        in: 'header',
        name: 'Idempotency-Key',
        required: true,
        description: expect.stringContaining('1 to 255 visible ASCII characters'),
        schema: KEY_SCHEMA,
      })
    }
    const orders = doc.paths['/orders']?.post as Operation
    expect(orders.responses['2XX']?.headers?.['Idempotency-Status']?.schema).toEqual({
      type: 'string',
      enum: ['executed', 'replayed'],
    })
    expect(orders.responses['2XX']?.headers?.['Idempotent-Replayed']?.schema).toEqual({
      type: 'string',
      enum: ['true'],
    })
    // The webhooks take their key from the delivery: no Idempotency-Key parameter.
    expect(keyParameter(doc.paths['/webhooks/stripe']?.post)).toBeUndefined()
    expect(keyParameter(doc.paths['/webhooks/github']?.post)).toBeUndefined()
  })

  it('is what docs/openapi.md shows of POST /orders', async () => {
    const doc = await document()
    const text = readFileSync(new URL('../../docs/openapi.md', import.meta.url), 'utf8')
    const fragment = /```json\n([\s\S]*?)\n```/.exec(text)?.[1]

    expect(fragment).toBeDefined()
    expect(doc.paths['/orders']?.post).toMatchObject(JSON.parse(fragment as string))
    expect(doc.components.schemas.IdempotencyProblem).toBeDefined()
  })

  it('leaves the unprotected routes as they are', async () => {
    const doc = await document()

    for (const operation of [doc.paths['/orders']?.get, doc.paths['/accounts/{id}']?.get]) {
      expect(operation).toBeDefined()
      expect(keyParameter(operation)).toBeUndefined()
      expect(Object.keys((operation as Operation).responses)).toEqual(['200'])
    }
  })

  it('changes no answer: a request without its key is still the layer 400 problem, a quoted key is accepted', async () => {
    await document()
    const headers = { authorization: 'Bearer alice', 'content-type': 'application/json' }
    const payload = { item: 'book', qty: 1 }

    const missing = await app.inject({ method: 'POST', url: '/orders', headers, payload })
    const quoted = await app.inject({
      method: 'POST',
      url: '/orders',
      headers: { ...headers, 'idempotency-key': '"order-1"' },
      payload,
    })

    expect(missing.statusCode).toBe(400)
    expect(missing.headers['content-type']).toBe('application/problem+json; charset=utf-8')
    expect(missing.headers['idempotency-status']).toBe('key-missing')
    expect(missing.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' })
    expect(quoted.statusCode).toBe(201)
    expect(quoted.headers['idempotency-status']).toBe('executed')
  })
})

describe.each(['before', 'after'] as const)('@fastify/swagger registered %s the plugin', (order) => {
  let app: FastifyInstance

  afterEach(async () => {
    await app.close()
  })

  it('documents the protected routes, their own responses kept beside the problems', async () => {
    app = Fastify()
    const openapi = { openapi: { info: { title: 'orders', version: '1.0.0' } } }
    if (order === 'before') await app.register(swagger, openapi)
    await app.register(idempotency, {
      store: memoryStore(),
      secrets: { current: 1, keys: { 1: SECRET } },
      principal: () => 'alice',
    })
    if (order === 'after') await app.register(swagger, openapi)
    app.post(
      '/orders',
      {
        config: { idempotency: { required: false } },
        schema: {
          headers: { type: 'object', properties: { 'x-tenant': { type: 'string' } }, required: ['x-tenant'] },
          response: {
            201: { description: 'Created', type: 'object', properties: { id: { type: 'string' } } },
            400: { description: 'Invalid order.', type: 'object', properties: { message: { type: 'string' } } },
          },
        },
      },
      async (_request, reply) => reply.code(201).send({ id: 'o1' }),
    )
    app.get('/orders', async () => [])
    await app.ready()

    const doc = app.swagger() as unknown as Doc
    await validated(doc)
    const post = doc.paths['/orders']?.post as Operation
    expect(post.parameters?.map((parameter) => [parameter.name, parameter.required])).toEqual([
      ['x-tenant', true],
      ['Idempotency-Key', false],
    ])
    expect(Object.keys(post.responses)).toEqual(['201', '400', '401', '409', '422', '503'])
    expect(post.responses['201']?.headers?.['Idempotency-Status']).toBeDefined()
    expect(post.responses['201']?.content?.['application/json']?.schema).toMatchObject({ type: 'object' })
    expect(Object.keys(post.responses['400']?.content ?? {})).toEqual(['application/json', 'application/problem+json'])
    expect(doc.paths['/orders']?.get?.responses).toEqual({ '200': { description: 'Default Response' } })

    // The route's own headers schema still validates, and the key header is not made to.
    const noTenant = await app.inject({ method: 'POST', url: '/orders', payload: {} })
    const unprotected = await app.inject({ method: 'POST', url: '/orders', headers: { 'x-tenant': 't' }, payload: {} })
    expect(noTenant.statusCode).toBe(400)
    expect(noTenant.headers['idempotency-status']).toBeUndefined()
    expect(unprotected.statusCode).toBe(201)
  })
})
