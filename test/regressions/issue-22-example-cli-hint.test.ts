/**
 * Issue 22: the records of the example app can only be found with its secret, which only the
 * example's source showed. Its startup line now says how to point the `idemkit` command at its
 * store, and the command it prints finds the record of a request made to it.
 */
import { randomUUID } from 'node:crypto'
import { afterEach, describe, expect, inject, it } from 'vitest'
import { cliHint, DEVELOPMENT_SECRET } from '../../examples/environment.js'
import { type AppProcess, startAppProcess } from '../helpers/app-process.js'
import { cli } from '../helpers/cli.js'

async function hintLine(app: AppProcess): Promise<string> {
  const deadline = Date.now() + 10_000
  for (;;) {
    const line = app
      .output()
      .split('\n')
      .find((text) => text.includes('idemkit command'))
    if (line !== undefined) return (JSON.parse(line) as { msg: string }).msg
    if (Date.now() > deadline) throw new Error(`no idemkit line in: ${app.output()}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

describe.each([
  ['Fastify', 'examples/fastify-app.ts'],
  ['Express', 'examples/express-app.ts'],
  ['Hono', 'examples/hono-app.ts'],
  ['NestJS', 'examples/nest-app.ts'],
])('the %s example started on Redis without IDEMPOTENCY_SECRET', (_name, script) => {
  let app: AppProcess | undefined

  afterEach(async () => {
    await app?.stop()
  })

  it('prints an idemkit command that finds the record of its request', async () => {
    const redisUrl = inject('redisUrl')
    app = await startAppProcess(script, { REDIS_URL: redisUrl, IDEMPOTENCY_SECRET: '' })
    const key = randomUUID()
    const started = app
    const response = await fetch(`${started.url}/orders`, {
      method: 'POST',
      headers: { authorization: 'Bearer alice', 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ item: 'book', qty: 1 }),
    }).catch((error: unknown) => {
      throw new Error(`POST /orders failed (${String(error)}); the app's output: ${started.output().slice(-2000)}`)
    })
    const hint = await hintLine(app)
    const secret = /IDEMPOTENCY_SECRET=(\S+)/.exec(hint)?.[1] ?? ''
    const store = /--store (\S+)/.exec(hint)?.[1] ?? ''

    const found = await cli(
      ['inspect', '--store', store, '--principal', 'alice', '--key', key, '--operation', 'POST /orders'],
      { IDEMPOTENCY_SECRET: secret },
    )

    expect(response.status).toBe(201)
    expect(hint).toContain('this app runs with the development secret')
    expect(hint).toContain('after npm run build')
    expect(hint).toContain(' node dist/src/admin/cli.js inspect ')
    expect(secret).toBe(DEVELOPMENT_SECRET)
    expect(store).toBe(redisUrl)
    expect(found.code).toBe(0)
    expect(found.stdout).toMatch(/state\s+COMPLETED/)
  }, 120_000)
})

describe('the idemkit line of the example environment', () => {
  it('names no secret when the app was given one', () => {
    const hint = cliHint({ DATABASE_URL: 'postgres://app@127.0.0.1:5432/app', IDEMPOTENCY_SECRET: 'x'.repeat(40) })
    expect(hint).toContain('--store postgres://app@127.0.0.1:5432/app')
    expect(hint).toContain('IDEMPOTENCY_SECRET=<the secret this app runs with>')
    expect(hint).not.toContain('x'.repeat(40))
  })

  it('leaves a password out of the store URL', () => {
    const hint = cliHint({ REDIS_URL: 'redis://:hunter2@127.0.0.1:6379' })
    expect(hint).toContain('--store redis://:<password>@127.0.0.1:6379')
    expect(hint).not.toContain('hunter2')
  })

  it('says the in-memory store cannot be inspected from outside', () => {
    expect(cliHint({})).toMatch(/in-memory store lives in this process and cannot be inspected/)
  })
})
