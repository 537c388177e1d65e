/**
 * Fault 5: the app SIGKILLed mid-handler. Until the lease runs out a retry gets 409; after it,
 * the documented answer: 503 recovery-required by default (the effect may have happened), or
 * exactly one re-run, with the next fencing token, on a route with expiredExecution 'takeover'.
 * Never a silent second run; and no key outlives lease plus failure retention.
 */
import { randomUUID } from 'node:crypto'
import type { Redis } from 'ioredis'
import { Redis as RedisClient } from 'ioredis'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import {
  type Answer,
  FAULT_APPS,
  post,
  readRecord,
  recordKey,
  sleep,
  startFaultApp,
  until,
} from '../helpers/fault-app.js'
import { recordFigures, tally } from '../helpers/figures.js'

const LEASE_MS = 1_000
const RETENTION_MS = 3_000
const USER = 'fault5'

function serverNow([seconds, micros]: (string | number)[]): number {
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
}

describe.each(FAULT_APPS)('fault 5: the app (%s) SIGKILLed mid-handler', (adapter, script) => {
  let victim: AppProcess
  let survivor: AppProcess
  let log: ExecutionLog
  let admin: Redis

  beforeAll(async () => {
    log = createExecutionLog()
    const env = {
      REDIS_URL: inject('redisUrl'),
      EXECUTION_LOG: log.path,
      IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
      IDEMPOTENCY_FAILURE_RETENTION_MS: String(RETENTION_MS),
    }
    ;[victim, survivor] = await Promise.all([startFaultApp(env, script), startFaultApp(env, script)])
    admin = new RedisClient(inject('redisUrl'))
  })

  afterAll(async () => {
    await Promise.all([victim.stop(), survivor.stop()])
    admin.disconnect()
    log.remove()
  })

  /** Retries every 100 ms while the answer is 409, at most 50 times; returns every answer. */
  async function retryWhileInFlight(send: () => Promise<Answer>): Promise<Answer[]> {
    const answers: Answer[] = []
    for (let i = 0; i < 50; i++) {
      const answer = await send()
      answers.push(answer)
      if (answer.status !== 409) break
      await sleep(100)
    }
    return answers
  }

  it('answers 409, then recovery-required (or one re-run under takeover), and forgets the key after lease plus retention', async (context) => {
    const recoverKey = randomUUID()
    const takeoverKey = randomUUID()
    const body = { item: 'charge', qty: 1, delayMs: 2_000 }
    const sendRecover = (app: AppProcess) => post(app.url, { user: USER, key: recoverKey, body })
    const sendTakeover = (app: AppProcess) =>
      post(app.url, { user: USER, key: takeoverKey, body, path: '/orders-takeover' })

    // Both requests reach the victim's handler; then it dies mid-handler.
    void sendRecover(victim).catch(() => undefined)
    void sendTakeover(victim).catch(() => undefined)
    await until('both handlers to start', () => (log.executions().length === 2 ? true : undefined))
    await victim.stop('SIGKILL')

    const recoverAnswers = await retryWhileInFlight(() => sendRecover(survivor))
    const [ttlMs, recovered] = await Promise.all([
      admin.pttl(recordKey(USER, recoverKey)),
      readRecord(admin, recordKey(USER, recoverKey)),
    ])
    const expiresAt = recovered?.expiresAt
    const leaseUntil = recovered?.leaseUntil
    const laterRecover = await Promise.all(Array.from({ length: 5 }, () => sendRecover(survivor)))
    // Both leases ran out at about the same time: 20 retries at once, then one at a time.
    const takeoverBurst = await Promise.all(Array.from({ length: 20 }, () => sendTakeover(survivor)))
    const takeoverWaits = await retryWhileInFlight(() => sendTakeover(survivor))
    await until('the re-run to finish', () =>
      log.executions((e) => e.key === takeoverKey).length === 2 ? true : undefined,
    )
    const takeoverReplay = (await retryWhileInFlight(() => sendTakeover(survivor))).at(-1) as Answer
    const recoverTokens = log.executions((e) => e.key === recoverKey).map((e) => e.token)
    const takeoverTokens = log.executions((e) => e.key === takeoverKey).map((e) => e.token)
    // No key outlives lease plus retention: once Redis's clock passes expiresAt it is gone.
    await until(
      'Redis time to pass expiresAt',
      async () => (serverNow(await admin.time()) > Number(expiresAt) ? true : undefined),
      LEASE_MS + RETENTION_MS + 3_000,
      50,
    )
    const existsAfterExpiry = await admin.exists(recordKey(USER, recoverKey))
    const afterRetention = await sendRecover(survivor)

    const statusOf = (a: Answer) => `${a.status}${a.replayed ? ' replay' : ''}${a.code ? ` ${a.code}` : ''}`
    recordFigures(context, '5', `app SIGKILLed mid-handler (${adapter})`, {
      'recover: retries until the lease ran out': tally(recoverAnswers.map(statusOf)),
      'recover: later retries': tally(laterRecover.map(statusOf)),
      'recover: executions (fencing tokens)': recoverTokens.join(','),
      'recover: record TTL after the lease, ms': ttlMs,
      'recover: expiresAt - leaseUntil, ms': Number(expiresAt) - Number(leaseUntil),
      'recover: key exists once Redis time passed expiresAt': existsAfterExpiry,
      'recover: first request after that': statusOf(afterRetention),
      'takeover: 20 concurrent retries after the lease': tally(takeoverBurst.map(statusOf)),
      'takeover: then one at a time': tally(takeoverWaits.map(statusOf)),
      'takeover: executions (fencing tokens)': takeoverTokens.join(','),
      'takeover: replay after the re-run': statusOf(takeoverReplay),
    })
    // recover: 409 while the lease lasts, then recovery-required, never a second run
    expect(recoverAnswers.slice(0, -1).every((a) => a.status === 409 && a.retryAfter !== null)).toBe(true)
    for (const answer of [recoverAnswers.at(-1), ...laterRecover]) {
      expect(answer).toMatchObject({ status: 503, code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
    }
    expect(Number(expiresAt) - Number(leaseUntil)).toBe(RETENTION_MS)
    expect(ttlMs).toBeGreaterThan(0)
    expect(ttlMs).toBeLessThanOrEqual(LEASE_MS + RETENTION_MS)
    // after lease + retention the key is gone, and a request is a first request again
    expect(existsAfterExpiry).toBe(0)
    expect(afterRetention).toMatchObject({ status: 201, replayed: false })
    expect(recoverTokens.slice(0, 1)).toEqual([1])
    // takeover: exactly one re-run, with fencing token 2, and its answer is kept
    expect(takeoverTokens).toEqual([1, 2])
    const reruns = [...takeoverWaits, ...takeoverBurst].filter((a) => a.status === 201)
    expect(reruns.filter((a) => !a.replayed)).toHaveLength(1)
    expect([...takeoverWaits, ...takeoverBurst].every((a) => a.status === 201 || a.status === 409)).toBe(true)
    expect(takeoverReplay).toMatchObject({ status: 201, replayed: true })
    expect(JSON.parse(takeoverReplay.body).token).toBe(2)
  })
})
