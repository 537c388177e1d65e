/**
 * Fault 14 (issue 10, item 4): Redis paused for 40 s across a claim. The client gets its 503
 * ("nothing was processed; retry") at the claim deadline, but the claim it sent is still in
 * Redis's socket buffer and lands, with start, as EXECUTING the moment Redis resumes, under an
 * owner whose handler never ran. A background release that gave up after a few tries within
 * half a lease left it to answer 409 and then recovery-required for the whole failure retention.
 * The undecided claim is now settled for as long as the process lives: within a lease of the
 * resume the key is usable again (a fresh 201), never recovery-required.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, post, redisReady, sleep, startFaultApp } from '../helpers/fault-app.js'
import { type FaultRedis, startFaultRedis } from '../helpers/fault-redis.js'
import { recordFigures, tally } from '../helpers/figures.js'

const LEASE_MS = 3_000
const PAUSE_MS = 40_000

describe('fault 14: a claim that lands late', () => {
  let redis: FaultRedis
  let app: AppProcess
  let log: ExecutionLog

  beforeAll(async () => {
    redis = await startFaultRedis()
    log = createExecutionLog()
    app = await startFaultApp({
      REDIS_URL: redis.url,
      EXECUTION_LOG: log.path,
      REDIS_COMMAND_TIMEOUT_MS: '1000',
      IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
    })
  })

  afterAll(async () => {
    redis.resume()
    await app.stop()
    await redis.stop()
    log.remove()
  })

  it('frees the key within a lease of the resume, never recovery-required', async (context) => {
    const user = 'fault14'
    const key = randomUUID()
    const body = { item: 'late', qty: 1 }
    await redisReady(app)
    redis.pause()
    const pausedAt = performance.now()

    const first = await post(app.url, { user, key, body, deadlineMs: 20_000 })
    await sleep(PAUSE_MS - (performance.now() - pausedAt))
    redis.resume()
    const resumedAt = performance.now()
    const answers: Answer[] = []
    let freedAfterMs = -1
    while (performance.now() - resumedAt < LEASE_MS * 3) {
      const answer = await post(app.url, { user, key, body })
      answers.push(answer)
      if (answer.status === 201) {
        freedAfterMs = Math.round(performance.now() - resumedAt)
        break
      }
      await sleep(100)
    }
    const executions = log.executions((e) => e.key === key).length

    recordFigures(context, '14', 'Redis paused 40 s across a claim, then resumed', {
      'first answer': `${first.status} ${first.code ?? ''}`,
      'answers after resume': tally(
        answers.map((a) => `${a.status}${a.replayed ? ' replay' : ''}${a.code ? ` ${a.code}` : ''}`),
      ),
      'key usable again after resume (ms)': freedAfterMs,
      'lease (ms)': LEASE_MS,
      executions,
    })
    expect(first).toMatchObject({ status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
    expect(answers.some((a) => a.code === 'IDEMPOTENCY_RECOVERY_REQUIRED')).toBe(false)
    expect(answers.at(-1)).toMatchObject({ status: 201, replayed: false })
    expect(freedAfterMs).toBeGreaterThanOrEqual(0)
    expect(freedAfterMs).toBeLessThanOrEqual(LEASE_MS)
    expect(executions).toBe(1)
  })
})
