/**
 * Fault 17: PostgreSQL slow to answer, and every answer still bounded.
 * - A row held locked by another session (an admin's open transaction) past the store's
 *   `lockTimeoutMs`: a claim that must lock it (a new key whose row that session inserted) is
 *   cancelled by the server and rolled back, the client gets 503 (nothing was processed) after
 *   about `lockTimeoutMs`; a replay of a completed key whose row is locked is answered at once
 *   (it needs no lock); other keys are served meanwhile; once the lock goes the key runs once.
 * - The whole server paused (SIGSTOP of the postmaster and every backend) across new claims:
 *   503 at the executor's claim deadline (`claimTimeoutMs`), not a hang; after the resume, a
 *   claim that landed late is settled and the key runs once.
 */
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, post, recordKey, sleep, startFaultApp } from '../helpers/fault-app.js'
import { type FaultPostgres, startFaultPostgres } from '../helpers/fault-postgres.js'
import { recordFigures, tally } from '../helpers/figures.js'

const LOCK_TIMEOUT_MS = 1_000
const LEASE_MS = 3_000
const PAUSE_MS = 8_000
const show = (a: Answer) => `${a.status}${a.replayed ? ' replay' : ''}${a.code ? ` ${a.code}` : ''}`

describe('fault 17: a row locked past lock_timeout', () => {
  let app: AppProcess
  let admin: pg.Client
  let log: ExecutionLog

  beforeAll(async () => {
    log = createExecutionLog()
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    app = await startFaultApp({
      DATABASE_URL: inject('postgresUrl'),
      EXECUTION_LOG: log.path,
      PG_LOCK_TIMEOUT_MS: String(LOCK_TIMEOUT_MS),
    })
  })

  afterAll(async () => {
    await app?.stop()
    await admin?.end()
    log.remove()
  })

  it('answers 503 after about lockTimeoutMs, serves other keys meanwhile, and runs the key once the lock goes', async (context) => {
    const user = `fault17a-${randomUUID().slice(0, 8)}`
    const done = randomUUID()
    const key = randomUUID()
    const body = { item: 'book', qty: 1 }
    const first = await post(app.url, { user, key: done, body })
    // Another session holds the completed key's row, and a row for the new key it has inserted
    // and not committed: a claim of the new key must wait for that row.
    await admin.query('BEGIN')
    await admin.query('SELECT 1 FROM public.idemkit_records WHERE key = $1 FOR UPDATE', [recordKey(user, done)])
    await admin.query(
      `INSERT INTO public.idemkit_records (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, expires_at, created_at, updated_at)
       VALUES ($1, 'CLAIMED', repeat('0', 64), 1, 1, 'x', 'x', 'x', 'x', now(), now() + interval '1 hour', now(), now())`,
      [recordKey(user, key)],
    )

    const started = performance.now()
    const timed = (answer: Promise<Answer>) =>
      answer.then((a) => ({ answer: a, ms: Math.round(performance.now() - started) }))
    const [locked, replay, other] = await Promise.all([
      timed(post(app.url, { user, key, body, deadlineMs: 10_000 })),
      timed(post(app.url, { user, key: done, body, deadlineMs: 10_000 })),
      timed(post(app.url, { user, key: randomUUID(), body })),
    ])
    await admin.query('ROLLBACK')
    const after = await post(app.url, { user, key, body })
    const again = await post(app.url, { user, key, body })

    recordFigures(context, '17a', 'a row locked by another session past lock_timeout', {
      lockTimeoutMs: LOCK_TIMEOUT_MS,
      'new key, row inserted by another session: answer': show(locked.answer),
      'new key: answered after ms': locked.ms,
      'completed key, row locked: answer': show(replay.answer),
      'completed key: answered after ms': replay.ms,
      'other key meanwhile: answer': show(other.answer),
      'other key: answered after ms': other.ms,
      'new key once the lock went': `${show(after)}, then ${show(again)}`,
      executions: log.executions((e) => e.key === key).length,
    })
    expect(first).toMatchObject({ status: 201, replayed: false })
    expect(locked.answer).toMatchObject({ status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
    expect(Number(locked.answer.retryAfter)).toBeGreaterThanOrEqual(1)
    expect(locked.ms).toBeGreaterThanOrEqual(LOCK_TIMEOUT_MS - 50)
    expect(locked.ms).toBeLessThan(LOCK_TIMEOUT_MS + 2_000)
    // A replay changes nothing: it is answered from the row as committed, without its lock.
    expect(replay.answer).toMatchObject({ status: 201, replayed: true, body: first.body })
    expect(replay.ms).toBeLessThan(LOCK_TIMEOUT_MS)
    expect(other.answer).toMatchObject({ status: 201, replayed: false })
    expect(other.ms).toBeLessThan(LOCK_TIMEOUT_MS)
    expect(after).toMatchObject({ status: 201, replayed: false })
    expect(again).toMatchObject({ status: 201, replayed: true, body: after.body })
    expect(log.executions((e) => e.key === key)).toHaveLength(1)
  })
})

describe('fault 17: the PostgreSQL server paused', () => {
  let postgres: FaultPostgres
  let app: AppProcess
  let log: ExecutionLog

  beforeAll(async () => {
    postgres = await startFaultPostgres()
    log = createExecutionLog()
    app = await startFaultApp({
      DATABASE_URL: postgres.url,
      EXECUTION_LOG: log.path,
      IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
    })
  })

  afterAll(async () => {
    postgres?.resume()
    await app?.stop()
    await postgres?.stop()
    log.remove()
  })

  it('answers 503 at the claim deadline while paused, and runs each key once after the resume', async (context) => {
    const user = 'fault17b'
    const keys = Array.from({ length: 5 }, () => randomUUID())
    const body = { item: 'paused', qty: 1 }
    expect((await post(app.url, { user, key: 'warm-up', body })).status).toBe(201)
    postgres.pause()
    const pausedAt = performance.now()

    const paused = await Promise.all(
      keys.map((key) =>
        post(app.url, { user, key, body, deadlineMs: 20_000 }).then((answer) => ({
          answer,
          ms: Math.round(performance.now() - pausedAt),
        })),
      ),
    )
    await sleep(PAUSE_MS - (performance.now() - pausedAt))
    postgres.resume()
    const resumedAt = performance.now()
    const freedAfter: number[] = []
    const answers: Answer[] = []
    for (const key of keys) {
      for (;;) {
        const answer = await post(app.url, { user, key, body })
        answers.push(answer)
        if (answer.status === 201 || performance.now() - resumedAt > LEASE_MS * 4) break
        await sleep(100)
      }
      freedAfter.push(Math.round(performance.now() - resumedAt))
    }
    const counts = log.countsByScope()

    recordFigures(context, '17b', `the PostgreSQL server paused ${PAUSE_MS / 1000} s across new claims`, {
      'answers while paused': tally(paused.map((p) => show(p.answer))),
      'answered after ms': paused.map((p) => p.ms).join(', '),
      'answers after resume': tally(answers.map(show)),
      'each key usable again after resume (ms)': freedAfter.join(', '),
      'executions per key': tally(keys.map((key) => counts.get(`${user}/${key}`) ?? 0)),
    })
    for (const { answer, ms } of paused) {
      expect(answer).toMatchObject({ status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
      expect(ms).toBeLessThan(5_000)
    }
    expect(answers.some((a) => a.code === 'IDEMPOTENCY_RECOVERY_REQUIRED')).toBe(false)
    expect(answers.filter((a) => a.status === 201)).toHaveLength(keys.length)
    expect(keys.every((key) => counts.get(`${user}/${key}`) === 1)).toBe(true)
  })
})
