/**
 * Edges that used to be silent: an Express app without `idem.captureBody` fingerprints the body
 * as validation left it (one warning, at the first protected request with a body), and a Fastify
 * route without `config.idempotency` ignores an Idempotency-Key (one warning per route with
 * `unannotatedKey: 'warn'`). Real HTTP, the logs read as the app's logger receives them.
 */
import { createServer } from 'node:http'
import { Writable } from 'node:stream'
import express from 'express'
import Fastify from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import expressIdempotency, { memoryStore } from '../../plugins/express/index.js'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { listen, type RunningApp, send } from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'

const secrets = { current: 1, keys: { 1: SECRET } }
const json = (key: string) => ({ 'idempotency-key': key, 'content-type': 'application/json' })

let app: RunningApp | undefined
afterEach(async () => {
  await app?.close()
  app = undefined
})

/** A pino-style logger that keeps the messages it is given. */
function keptLogger() {
  const warnings: string[] = []
  const log = {
    info() {},
    warn(_object: object, message: string) {
      warnings.push(message)
    },
    error() {},
  }
  return { warnings, log }
}

async function expressApp(withCapture: boolean, warnings: { log: object }): Promise<RunningApp> {
  const web = express()
  const idem = expressIdempotency({ store: memoryStore(), secrets, anonymous: true })
  web.use((req, _res, next) => {
    ;(req as unknown as { log: object }).log = warnings.log
    next()
  })
  web.use(express.json())
  if (withCapture) web.use(idem.captureBody)
  web.post('/orders', idem(), (req, res) => {
    res.status(201).json({ item: req.body.item })
  })
  return listen(createServer(web))
}

describe('Express without idem.captureBody', () => {
  it('warns once, at the first protected request with a body, and names the fix', async () => {
    const kept = keptLogger()
    app = await expressApp(false, kept)
    for (const key of ['a', 'b', 'c']) {
      const response = await send(app, 'POST', '/orders', { headers: json(key), body: { item: key } })
      expect(response.status).toBe(201)
    }
    const about = kept.warnings.filter((message) => message.includes('captureBody'))
    expect(about).toHaveLength(1)
    expect(about[0]).toContain('app.use(express.json(), idem.captureBody)')
  })

  it('says nothing when captureBody is mounted', async () => {
    const kept = keptLogger()
    app = await expressApp(true, kept)
    for (const key of ['a', 'b']) {
      const response = await send(app, 'POST', '/orders', { headers: json(key), body: { item: key } })
      expect(response.status).toBe(201)
    }
    expect(kept.warnings).toEqual([])
  })
})

/** A Fastify app whose pino logger writes its lines into `lines`. */
async function fastifyApp(lines: string[], unannotatedKey?: 'ignore' | 'warn'): Promise<RunningApp> {
  const stream = new Writable({
    write(chunk, _encoding, done) {
      lines.push(String(chunk))
      done()
    },
  })
  const web = Fastify({ logger: { level: 'warn', stream } })
  await web.register(fastifyIdempotency, {
    store: memoryStore(),
    secrets,
    anonymous: true,
    ...(unannotatedKey === undefined ? {} : { unannotatedKey }),
  })
  web.post('/orders', { config: { idempotency: true } }, async (_request, reply) => reply.code(201).send({ ok: 1 }))
  web.post('/refunds', async (_request, reply) => reply.code(201).send({ ok: 2 }))
  web.post('/transfers', async (_request, reply) => reply.code(201).send({ ok: 3 }))
  web.get('/orders', async () => ({ list: [] }))
  await web.listen({ port: 0, host: '127.0.0.1' })
  const address = web.server.address() as { port: number }
  return { url: `http://127.0.0.1:${address.port}`, port: address.port, logs: lines, close: () => web.close() }
}

const unannotated = (lines: readonly string[]) =>
  lines.filter((line) => line.includes('without config.idempotency')).map((line) => JSON.parse(line))

describe("Fastify's unannotatedKey", () => {
  it("'warn' logs once per unannotated route that gets a key, and lets the request through", async () => {
    const lines: string[] = []
    app = await fastifyApp(lines, 'warn')
    for (const key of ['a', 'b']) {
      expect((await send(app, 'POST', '/refunds', { headers: json(key), body: {} })).status).toBe(201)
    }
    expect((await send(app, 'POST', '/transfers', { headers: json('c'), body: {} })).status).toBe(201)
    expect((await send(app, 'POST', '/orders', { headers: json('d'), body: {} })).status).toBe(201)
    // No key, a safe method: nothing to say.
    expect(
      (await send(app, 'POST', '/transfers', { headers: { 'content-type': 'application/json' }, body: {} })).status,
    ).toBe(201)
    expect((await send(app, 'GET', '/orders', { headers: { 'idempotency-key': 'e' } })).status).toBe(200)
    const warnings = unannotated(lines)
    expect(warnings.map((line) => line.idempotency.route).sort()).toEqual(['/refunds', '/transfers'])
    expect(warnings[0].msg).toContain('config: { idempotency: true }')
  })

  it("stays silent by default ('ignore')", async () => {
    const lines: string[] = []
    app = await fastifyApp(lines)
    expect((await send(app, 'POST', '/refunds', { headers: json('a'), body: {} })).status).toBe(201)
    expect(unannotated(lines)).toEqual([])
  })

  it('refuses a value it does not know, naming the option', async () => {
    const web = Fastify()
    await expect(
      web
        .register(fastifyIdempotency, {
          store: memoryStore(),
          secrets,
          anonymous: true,
          unannotatedKey: 'log' as never,
        })
        .ready(),
    ).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_OPTION', message: expect.stringContaining('unannotatedKey') })
    await web.close()
  })
})
