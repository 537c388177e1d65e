/**
 * Fault 3: Redis stopped (SIGKILL) when requests arrive to claim: 503 with Retry-After and the
 * handler not run; after Redis is back, each key runs exactly once and then replays.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { FAULT_APPS, post, redisReady, startFaultApp } from '../helpers/fault-app.js'
import { type FaultRedis, startFaultRedis } from '../helpers/fault-redis.js'
import { recordFigures, tally } from '../helpers/figures.js'

const KEYS = 20

describe.each(FAULT_APPS)('fault 3: Redis stopped at claim (%s)', (adapter, script) => {
  let redis: FaultRedis
  let app: AppProcess
  let log: ExecutionLog

  beforeAll(async () => {
    redis = await startFaultRedis()
    log = createExecutionLog()
    app = await startFaultApp(
      { REDIS_URL: redis.url, EXECUTION_LOG: log.path, REDIS_COMMAND_TIMEOUT_MS: '1000' },
      script,
    )
  })

  afterAll(async () => {
    await app.stop()
    await redis.stop()
    log.remove()
  })

  it('answers 503 with Retry-After and runs nothing while Redis is down, then runs each key once', async (context) => {
    const user = 'fault3'
    const keys = Array.from({ length: KEYS }, () => randomUUID())
    const body = { item: 'book', qty: 1 }
    await redis.kill()

    const down = await Promise.all(keys.map((key) => post(app.url, { user, key, body, deadlineMs: 10_000 })))
    const executionsWhileDown = log.executions().length
    await redis.restart()
    await redisReady(app)
    const first = await Promise.all(keys.map((key) => post(app.url, { user, key, body })))
    const again = await Promise.all(keys.map((key) => post(app.url, { user, key, body })))
    const counts = log.countsByScope()

    recordFigures(context, '3', `Redis stopped at claim, then restarted (${adapter})`, {
      'requests while down': KEYS,
      'answers while down': tally(down.map((a) => `${a.status} ${a.code ?? ''} retry-after=${a.retryAfter}`)),
      'executions while down': executionsWhileDown,
      'answers after restart': tally(first.map((a) => `${a.status}${a.replayed ? ' replay' : ''}`)),
      'retries after that': tally(again.map((a) => `${a.status}${a.replayed ? ' replay' : ''}`)),
      'executions per key': tally(keys.map((key) => counts.get(`${user}/${key}`) ?? 0)),
    })
    for (const answer of down) {
      expect(answer).toMatchObject({ status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
      expect(Number(answer.retryAfter)).toBeGreaterThanOrEqual(1)
    }
    expect(executionsWhileDown).toBe(0)
    expect(first.every((a) => a.status === 201 && !a.replayed)).toBe(true)
    expect(again.every((a, i) => a.status === 201 && a.replayed && a.body === first[i]?.body)).toBe(true)
    expect(keys.every((key) => counts.get(`${user}/${key}`) === 1)).toBe(true)
  })
})
