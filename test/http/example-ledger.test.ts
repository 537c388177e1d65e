/**
 * The example apps with DATABASE_URL's setup: the PostgreSQL store and balances in PostgreSQL,
 * deposits on a `transaction: true` route. The balance, read from outside over HTTP, moves once
 * per key however often and however concurrently a deposit is sent.
 */

import { randomUUID } from 'node:crypto'
import { createServer } from 'node:http'
import type pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildExpressExampleApp } from '../../examples/express-app.js'
import { buildExampleApp } from '../../examples/fastify-app.js'
import { Ledger } from '../../examples/ledger.js'
import { postgresStore } from '../../src/stores/postgres/index.js'
import { listen, type RunningApp, send } from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'
import { testPostgresPool } from '../helpers/stores.js'

type Build = (pool: pg.Pool, ledger: Ledger) => Promise<RunningApp>

const fastify: Build = async (pool, ledger) => {
  const store = postgresStore({ pool, sweepIntervalMs: 0 })
  const app = await buildExampleApp({ store, secret: SECRET, ledger })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return { url: `http://127.0.0.1:${port}`, port, logs: [], close: () => app.close() }
}

const express: Build = async (pool, ledger) => {
  const store = postgresStore({ pool, sweepIntervalMs: 0 })
  const server = createServer(await buildExpressExampleApp({ store, secret: SECRET, ledger }))
  return listen(server)
}

describe.each([
  ['fastify', fastify],
  ['express', express],
] as const)('the %s example on PostgreSQL: deposits in the layer’s transaction', (_name, build) => {
  let pool: pg.Pool
  let ledger: Ledger
  let app: RunningApp

  beforeAll(async () => {
    pool = testPostgresPool({ max: 20 })
    ledger = new Ledger(pool)
    await ledger.migrate()
    app = await build(pool, ledger)
  })

  afterAll(async () => {
    await app.close()
    await pool.end()
  })

  const user = `ledger-${randomUUID().slice(0, 8)}`
  const deposit = (account: string, key: string, amount: number) =>
    send(app, 'POST', `/accounts/${account}/deposits`, {
      headers: { authorization: `Bearer ${user}`, 'content-type': 'application/json', 'idempotency-key': key },
      body: { amount },
    })
  const balance = async (account: string) =>
    (await send(app, 'GET', `/accounts/${account}`, { headers: { authorization: `Bearer ${user}` } })).json().balance

  it('moves the balance once per key, and replays the same deposit', async () => {
    const account = randomUUID().slice(0, 8)
    const key = randomUUID()
    const first = await deposit(account, key, 25)
    const again = await deposit(account, key, 25)
    const other = await deposit(account, randomUUID(), 5)

    expect(first.status).toBe(201)
    expect(first.json()).toMatchObject({ accountId: account, amount: 25, balance: 25 })
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(again.json()).toEqual(first.json())
    expect(other.json()).toMatchObject({ balance: 30 })
    expect(await balance(account)).toBe(30)
    expect(await ledger.depositsOf(user, account)).toBe(2)
  })

  it('moves the balance once for 20 identical deposits sent at once', async () => {
    const account = randomUUID().slice(0, 8)
    const key = randomUUID()
    const answers = await Promise.all(Array.from({ length: 20 }, () => deposit(account, key, 7)))
    const statuses = answers.map((answer) => answer.status)

    expect(statuses.every((status) => status === 201 || status === 409)).toBe(true)
    expect(statuses).toContain(201)
    expect(await balance(account)).toBe(7)
    expect(await ledger.depositsOf(user, account)).toBe(1)
  })
})
