/**
 * Fault 11: a key flood. One principal sends 50,000 requests with distinct keys while another
 * works normally: the other's requests still run once each and replay. Redis memory per stored
 * record is measured (docs/guarantees.md quotes it). Then the documented cap,
 * @fastify/rate-limit keyed by principal, holds: the flooder gets 429 past its limit, with no
 * record written for those, and the other principal is not affected.
 */
import { randomUUID } from 'node:crypto'
import autocannon from 'autocannon'
import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, post, RECORD_KEY_SHAPE, startFaultApp } from '../helpers/fault-app.js'
import { type FaultRedis, startFaultRedis } from '../helpers/fault-redis.js'
import { recordFigures, tally } from '../helpers/figures.js'

const FLOOD = 50_000
const CAP = 100

/** Sends `amount` POST /orders as `user`, each with a fresh key, over 32 connections. */
async function flood(url: string, user: string, amount: number): Promise<autocannon.Result> {
  let n = 0
  return autocannon({
    url: `${url}/orders`,
    connections: 32,
    amount,
    requests: [
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${user}` },
        body: JSON.stringify({ item: 'flood', qty: 1 }),
        setupRequest: (request) => {
          request.headers = { ...request.headers, 'idempotency-key': `flood-${n++}-${randomUUID()}` }
          return request
        },
      },
    ],
  })
}

/** A normal client: `count` keys, each sent once and retried once. */
async function normalWork(
  url: string,
  user: string,
  count: number,
): Promise<{ keys: string[]; first: Answer[]; retry: Answer[] }> {
  const keys: string[] = []
  const first: Answer[] = []
  const retry: Answer[] = []
  for (let i = 0; i < count; i++) {
    const key = randomUUID()
    keys.push(key)
    first.push(await post(url, { user, key, body: { item: `normal-${i}`, qty: 1 } }))
    retry.push(await post(url, { user, key, body: { item: `normal-${i}`, qty: 1 } }))
  }
  return { keys, first, retry }
}

function statuses(result: autocannon.Result): string {
  return Object.entries(result.statusCodeStats ?? {})
    .map(([code, { count }]) => `${code}:${count}`)
    .join(' ')
}

describe('fault 11: one principal floods keys', () => {
  let redis: FaultRedis
  let admin: Redis
  let log: ExecutionLog
  const apps: AppProcess[] = []

  beforeAll(async () => {
    redis = await startFaultRedis()
    admin = redis.admin()
    log = createExecutionLog()
  })

  afterAll(async () => {
    await Promise.all(apps.map((app) => app.stop()))
    await redis.stop()
    log.remove()
  })

  it(`keeps serving another principal through ${FLOOD} flooded keys, and measures memory per record`, async (context) => {
    const app = await startFaultApp({ REDIS_URL: redis.url, EXECUTION_LOG: log.path })
    apps.push(app)
    const before = Number((await redis.info('memory')).used_memory)
    const keysBefore = await admin.dbsize()

    const [flooded, normal] = await Promise.all([flood(app.url, 'flooder', FLOOD), normalWork(app.url, 'worker', 200)])
    const records = (await admin.dbsize()) - keysBefore
    const after = Number((await redis.info('memory')).used_memory)
    const sample = (await admin.scan('0', 'COUNT', 200))[1].filter((key) => RECORD_KEY_SHAPE.test(key)).slice(0, 50)
    const usages = await Promise.all(sample.map((key) => admin.memory('USAGE', key, 'SAMPLES', '0')))
    const perRecordUsage = Math.round(usages.reduce<number>((a, b) => a + Number(b ?? 0), 0) / usages.length)
    const counts = log.countsByScope()
    const workerExecutions = normal.keys.map((key) => counts.get(`worker/${key}`) ?? 0)
    const floodExecutions = log.executions((e) => e.user === 'flooder').length

    recordFigures(context, '11', `key flood: ${FLOOD} distinct keys from one principal`, {
      'flood answers': statuses(flooded),
      'flood errors / timeouts': `${flooded.errors} / ${flooded.timeouts}`,
      'flood rate (req/s, mean)': Math.round(flooded.requests.average),
      'flood handler executions': floodExecutions,
      'other principal: first answers': tally(normal.first.map((a) => a.status)),
      'other principal: retries': tally(normal.retry.map((a) => `${a.status}${a.replayed ? ' replay' : ''}`)),
      'other principal: executions per key': tally(workerExecutions),
      'records stored': records,
      'Redis used_memory growth per record, bytes': Math.round((after - before) / records),
      'MEMORY USAGE per record (sample of 50), bytes': perRecordUsage,
      'records per GiB (used_memory)': Math.round((1024 ** 3 / (after - before)) * records),
    })
    expect(flooded['2xx']).toBe(FLOOD)
    expect(flooded.non2xx + flooded.errors + flooded.timeouts).toBe(0)
    expect(floodExecutions).toBe(FLOOD)
    expect(normal.first.every((a) => a.status === 201 && !a.replayed)).toBe(true)
    expect(normal.retry.every((a, i) => a.status === 201 && a.replayed && a.body === normal.first[i]?.body)).toBe(true)
    expect(workerExecutions.every((n) => n === 1)).toBe(true)
    expect(records).toBe(FLOOD + normal.keys.length)
  })

  it(`caps the flooder at ${CAP} requests per window with @fastify/rate-limit keyed by principal`, async (context) => {
    const capped = await startFaultApp({
      REDIS_URL: redis.url,
      EXECUTION_LOG: log.path,
      RATE_LIMIT_MAX: String(CAP),
      RATE_LIMIT_WINDOW_MS: '600000',
    })
    apps.push(capped)
    const keysBefore = await admin.dbsize()

    const [flooded, normal] = await Promise.all([
      flood(capped.url, 'capped-flooder', 1_000),
      normalWork(capped.url, 'capped-worker', 40),
    ])
    const records = (await admin.dbsize()) - keysBefore
    const executions = log.executions((e) => e.user === 'capped-flooder').length

    recordFigures(context, '11', 'flood cap: @fastify/rate-limit keyed by principal', {
      'cap (requests per principal per window)': CAP,
      'flooder: 1000 distinct keys answered': statuses(flooded),
      'flooder: handler executions': executions,
      'other principal: answers (first / retry)': `${tally(normal.first.map((a) => a.status))} / ${tally(normal.retry.map((a) => `${a.status}${a.replayed ? ' replay' : ''}`))}`,
      'records written': records,
    })
    expect(flooded.statusCodeStats?.['201']?.count).toBe(CAP)
    expect(flooded.statusCodeStats?.['429']?.count).toBe(1_000 - CAP)
    expect(executions).toBe(CAP)
    expect(normal.first.every((a) => a.status === 201)).toBe(true)
    expect(normal.retry.every((a) => a.status === 201 && a.replayed)).toBe(true)
    expect(records).toBe(CAP + normal.keys.length)
  })
})
