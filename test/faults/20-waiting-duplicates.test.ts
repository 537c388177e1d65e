/**
 * Fault 20: duplicates that wait (`inFlight: { waitMs }`) while the first request's process is
 * SIGKILLed mid-handler. They never hang: with waitMs shorter than the lease they answer 409
 * at their deadline; with a longer one, 503 recovery-required once the lease has run out. Also
 * across two processes without a kill: 100 waiting duplicates, 1 execution, 100 × 201. Redis
 * commands per waiting request are counted from INFO commandstats.
 */
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { commandCalls } from '../../scripts/redis-server.js'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, post, startFaultApp, until } from '../helpers/fault-app.js'
import { recordFigures, tally } from '../helpers/figures.js'

const LEASE_MS = 1_500
const USER = 'fault20'

describe('fault 20: waiting duplicates', () => {
  let victim: AppProcess
  let shortWait: AppProcess
  let longWait: AppProcess
  let log: ExecutionLog
  let admin: Redis

  beforeAll(async () => {
    log = createExecutionLog()
    const env = { REDIS_URL: inject('redisUrl'), EXECUTION_LOG: log.path, IDEMPOTENCY_LEASE_MS: String(LEASE_MS) }
    ;[victim, shortWait, longWait] = await Promise.all([
      startFaultApp({ ...env, IDEMPOTENCY_WAIT_MS: '5000' }),
      startFaultApp({ ...env, IDEMPOTENCY_WAIT_MS: '700' }),
      startFaultApp({ ...env, IDEMPOTENCY_WAIT_MS: '5000' }),
    ])
    admin = new Redis(inject('redisUrl'))
  })

  afterAll(async () => {
    await Promise.all([victim.stop(), shortWait.stop(), longWait.stop()])
    admin.disconnect()
    log.remove()
  })

  const statusOf = (a: Answer) => `${a.status}${a.replayed ? ' replay' : ''}${a.code ? ` ${a.code}` : ''}`

  it('100 duplicates across two processes wait for one execution: 100 × 201, one body, no 409', async (context) => {
    const key = randomUUID()
    const body = { item: 'wait', qty: 1, delayMs: 300 }
    await admin.config('RESETSTAT')
    const apps = [victim, longWait]
    const answers = await Promise.all(
      Array.from({ length: 100 }, (_, i) => post((apps[i % 2] as AppProcess).url, { user: USER, key, body })),
    )
    const calls = await commandCalls(admin)
    const scripts = (calls.evalsha ?? 0) + (calls.eval ?? 0) + (calls.fcall ?? 0)
    const executions = log.executions((entry) => entry.key === key).length
    recordFigures(context, '20a', '100 waiting duplicates across two processes (300 ms handler, waitMs 5000)', {
      answers: tally(answers.map(statusOf)),
      executions,
      'distinct bodies': new Set(answers.map((a) => a.body)).size,
      'Redis script calls': scripts,
      'Redis script calls per request': (scripts / 100).toFixed(2),
      'SSUBSCRIBE calls': calls.ssubscribe ?? 0,
      'SPUBLISH calls (inside the scripts)': calls.spublish ?? 0,
    })
    expect(executions).toBe(1)
    expect(answers.map((a) => a.status)).toEqual(Array(100).fill(201))
    expect(answers.filter((a) => a.replayed)).toHaveLength(99)
    expect(new Set(answers.map((a) => a.body)).size).toBe(1)
    // A claim each, a claim after the wake-up, the completion, a few polls: never a poll per waiter.
    expect(scripts).toBeLessThanOrEqual(215)
  })

  it('the first request SIGKILLed: 409 at the deadline (waitMs 700), recovery after the lease (waitMs 5000), never a hang', async (context) => {
    const key = randomUUID()
    const body = { item: 'wait-kill', qty: 1, delayMs: 10_000 }
    void post(victim.url, { user: USER, key, body }).catch(() => undefined)
    await until('the handler to start', () => (log.executions((e) => e.key === key).length === 1 ? true : undefined))
    const claimedAt = performance.now()
    const timed = (app: AppProcess) => {
      const sent = performance.now()
      return post(app.url, { user: USER, key, body, deadlineMs: 15_000 }).then((answer) => ({
        answer,
        ms: Math.round(performance.now() - sent),
        sinceClaim: Math.round(performance.now() - claimedAt),
      }))
    }
    const short = Array.from({ length: 10 }, () => timed(shortWait))
    const long = Array.from({ length: 10 }, () => timed(longWait))
    await new Promise((resolve) => setTimeout(resolve, 200))
    await victim.stop('SIGKILL')
    const shortAnswers = await Promise.all(short)
    const longAnswers = await Promise.all(long)
    recordFigures(context, '20b', 'the first request SIGKILLed while duplicates wait (lease 1.5 s)', {
      'waitMs 700: answers': tally(shortAnswers.map((a) => statusOf(a.answer))),
      'waitMs 700: answered after, ms': `${Math.min(...shortAnswers.map((a) => a.ms))}..${Math.max(...shortAnswers.map((a) => a.ms))}`,
      'waitMs 5000: answers': tally(longAnswers.map((a) => statusOf(a.answer))),
      'waitMs 5000: answered after the claim, ms': `${Math.min(...longAnswers.map((a) => a.sinceClaim))}..${Math.max(...longAnswers.map((a) => a.sinceClaim))}`,
      executions: log.executions((e) => e.key === key).length,
    })
    for (const { answer, ms } of shortAnswers) {
      expect(answer).toMatchObject({ status: 409, code: 'IDEMPOTENCY_IN_FLIGHT' })
      expect(answer.retryAfter).not.toBeNull()
      expect(ms).toBeGreaterThanOrEqual(690)
      expect(ms).toBeLessThan(3_000)
    }
    for (const { answer, sinceClaim } of longAnswers) {
      expect(answer).toMatchObject({ status: 503, code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
      expect(sinceClaim).toBeGreaterThanOrEqual(LEASE_MS - 100)
      expect(sinceClaim).toBeLessThan(LEASE_MS + 2_000)
    }
    expect(log.executions((e) => e.key === key)).toHaveLength(1)
  })
})
