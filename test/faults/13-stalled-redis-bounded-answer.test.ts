/**
 * Fault 13 (issue 10, item 3): Redis paused (SIGSTOP) before the claim. Every call then times
 * out after the client's command timeout, and without one deadline over the whole decision the
 * client waited for three claims and three inspections (about 12 s) for its 503. With
 * `claimTimeoutMs` (default 3000 ms) the answer comes within the deadline plus 500 ms, carries a
 * Retry-After at least as long, and nothing runs; once Redis is back every key runs once.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, post, redisReady, sleep, startFaultApp } from '../helpers/fault-app.js'
import { type FaultRedis, startFaultRedis } from '../helpers/fault-redis.js'
import { range, recordFigures, tally } from '../helpers/figures.js'

const CLAIM_TIMEOUT_MS = 3_000
const KEYS = 10

describe('fault 13: Redis stalled at claim', () => {
  let redis: FaultRedis
  let app: AppProcess
  let log: ExecutionLog

  beforeAll(async () => {
    redis = await startFaultRedis()
    log = createExecutionLog()
    // The defaults: commandTimeout 2000 ms, claimTimeoutMs 3000 ms.
    app = await startFaultApp({ REDIS_URL: redis.url, EXECUTION_LOG: log.path })
  })

  afterAll(async () => {
    redis.resume()
    await app.stop()
    await redis.stop()
    log.remove()
  })

  it('answers 503 within the claim deadline and runs nothing, then runs each key once', async (context) => {
    const user = 'fault13'
    const keys = Array.from({ length: KEYS }, () => randomUUID())
    const body = { item: 'book', qty: 1 }
    await redisReady(app)
    redis.pause()

    const timed = await Promise.all(
      keys.map(async (key) => {
        const started = performance.now()
        const answer = await post(app.url, { user, key, body, deadlineMs: 20_000 })
        return { answer, ms: Math.round(performance.now() - started) }
      }),
    )
    const executionsWhileStalled = log.executions().length
    redis.resume()
    await redisReady(app)
    // Claims that landed when Redis resumed are given back in the background (fault 14).
    const after: Answer[] = []
    for (const key of keys) {
      let answer: Answer
      for (let i = 0; ; i++) {
        answer = await post(app.url, { user, key, body })
        if (answer.status !== 409 || i > 100) break
        await sleep(200)
      }
      after.push(answer)
    }
    const counts = log.countsByScope()

    recordFigures(context, '13', 'Redis stalled at claim: one deadline for the decision', {
      'claimTimeoutMs / commandTimeout': `${CLAIM_TIMEOUT_MS} / 2000`,
      'answer times while stalled (ms)': range(timed.map((t) => t.ms)),
      'answers while stalled': tally(
        timed.map((t) => `${t.answer.status} ${t.answer.code ?? ''} retry-after=${t.answer.retryAfter}`),
      ),
      'executions while stalled': executionsWhileStalled,
      'answers after resume': tally(
        after.map((a) => `${a.status}${a.replayed ? ' replay' : ''}${a.code ? ` ${a.code}` : ''}`),
      ),
      'executions per key': tally(keys.map((key) => counts.get(`${user}/${key}`) ?? 0)),
    })
    for (const { answer, ms } of timed) {
      expect(answer).toMatchObject({ status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
      expect(ms).toBeLessThanOrEqual(CLAIM_TIMEOUT_MS + 500)
      expect(Number(answer.retryAfter)).toBeGreaterThanOrEqual(CLAIM_TIMEOUT_MS / 1000)
    }
    expect(executionsWhileStalled).toBe(0)
    expect(after.every((a) => a.status === 201 && !a.replayed)).toBe(true)
    expect(keys.every((key) => counts.get(`${user}/${key}`) === 1)).toBe(true)
  })
})
