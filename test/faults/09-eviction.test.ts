/**
 * Fault 9: eviction. Every record has a TTL, so any maxmemory-policy but noeviction (volatile-*
 * included) can drop records early. The store reads the policy with INFO: at startup
 * (`store.verify()`) it refuses to start; without that call, every claim is refused, so every
 * request answers 503 and runs nothing; with `unsafeEviction: 'warn'` it runs and logs a warning. Under noeviction at
 * maxmemory, Redis refuses new records: claims answer 503 and run nothing, while every claim
 * it admitted still gets its completion stored (the transition scripts run with allow-oom).
 */
import { randomUUID } from 'node:crypto'
import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, post, readRecord, recordKey, startFaultApp } from '../helpers/fault-app.js'
import { type FaultRedis, startFaultRedis } from '../helpers/fault-redis.js'
import { recordFigures, tally } from '../helpers/figures.js'

const statusOf = (a: Answer) => `${a.status}${a.replayed ? ' replay' : ''}${a.code ? ` ${a.code}` : ''}`

describe('fault 9: eviction policy and maxmemory', () => {
  let lru: FaultRedis
  let full: FaultRedis
  let log: ExecutionLog
  const apps: AppProcess[] = []
  const figures: Record<string, string | number> = {}

  beforeAll(async () => {
    ;[lru, full] = await Promise.all([
      startFaultRedis({ config: { 'maxmemory-policy': 'allkeys-lru', maxmemory: '64mb' } }),
      startFaultRedis(),
    ])
    log = createExecutionLog()
  })

  afterAll(async () => {
    await Promise.all(apps.map((app) => app.stop()))
    await Promise.all([lru.stop(), full.stop()])
    log.remove()
  })

  async function app(redis: FaultRedis, env: Record<string, string> = {}): Promise<AppProcess> {
    const started = await startFaultApp({ REDIS_URL: redis.url, EXECUTION_LOG: log.path, ...env })
    apps.push(started)
    return started
  }

  it('refuses to start on allkeys-lru and on volatile-lru', async () => {
    const allkeys = await app(lru).catch((error: Error) => error)
    await lru.admin().config('SET', 'maxmemory-policy', 'volatile-lru')
    const volatile = await app(lru).catch((error: Error) => error)
    await lru.admin().config('SET', 'maxmemory-policy', 'allkeys-lru')

    figures['startup on allkeys-lru / volatile-lru'] = [allkeys, volatile]
      .map((r) => (r instanceof Error ? (/ERR_IDEM_\w+/.exec(r.message)?.[0] ?? 'failed') : 'started'))
      .join(' / ')
    expect(allkeys).toBeInstanceOf(Error)
    expect((allkeys as Error).message).toContain('ERR_IDEM_STORE_MISCONFIGURED')
    expect((allkeys as Error).message).toContain('allkeys-lru')
    expect(volatile).toBeInstanceOf(Error)
    expect((volatile as Error).message).toContain('volatile-lru')
  })

  it('answers 503 and runs nothing when started without the startup check', async () => {
    const unchecked = await app(lru, { VERIFY_AT_STARTUP: '0' })
    const user = 'fault9-unchecked'

    const answers = await Promise.all(
      Array.from({ length: 10 }, () => post(unchecked.url, { user, key: randomUUID(), body: { item: 'a', qty: 1 } })),
    )

    figures['allkeys-lru without startup check: answers'] = tally(answers.map(statusOf))
    figures['allkeys-lru without startup check: executions'] = log.executions((e) => e.user === user).length
    expect(answers.every((a) => a.status === 503 && a.code === 'IDEMPOTENCY_STORE_UNAVAILABLE')).toBe(true)
    expect(log.executions((e) => e.user === user)).toHaveLength(0)
    expect(unchecked.output()).toContain('refuses every claim')
  })

  it("runs and logs a warning with unsafeEviction: 'warn'", async () => {
    const warned = await app(lru, { UNSAFE_EVICTION: 'warn' })
    const user = 'fault9-warned'

    const answer = await post(warned.url, { user, key: randomUUID(), body: { item: 'a', qty: 1 } })

    figures["allkeys-lru with unsafeEviction 'warn'"] =
      `${statusOf(answer)}, warning logged: ${warned.output().includes('may lose idempotency records')}`
    expect(answer).toMatchObject({ status: 201 })
    expect(warned.output()).toContain('may lose idempotency records')
  })

  it('answers 503 at maxmemory under noeviction and never runs a handler without a record', async () => {
    const admin: Redis = full.admin()
    const filled = await app(full)
    const user = 'fault9-full'
    await admin.set('ballast', 'x'.repeat(64 * 1024))
    const used = Number((await full.info('memory')).used_memory)
    await admin.config('SET', 'maxmemory', String(used + 160 * 1024))
    const keys = Array.from({ length: 800 }, () => randomUUID())

    const answers: Answer[] = []
    for (let i = 0; i < keys.length; i += 10) {
      answers.push(
        ...(await Promise.all(
          keys.slice(i, i + 10).map((key) => post(filled.url, { user, key, body: { item: 'x'.repeat(150), qty: 1 } })),
        )),
      )
    }
    const counts = log.countsByScope()
    const states = await Promise.all(
      keys.map(async (key) => (await readRecord(admin, recordKey(user, key)))?.state ?? null),
    )
    const rows = keys.map((key, i) => ({
      answer: answers[i] as Answer,
      executions: counts.get(`${user}/${key}`) ?? 0,
      state: states[i],
    }))
    // Once memory is freed, a refused key is a first request again.
    await admin.config('SET', 'maxmemory', '0')
    const refused = rows.filter((row) => row.answer.status === 503 && row.executions === 0)
    const retried = await Promise.all(
      refused
        .slice(0, 20)
        .map((row) =>
          post(filled.url, { user, key: keys[rows.indexOf(row)] as string, body: { item: 'x'.repeat(150), qty: 1 } }),
        ),
    )

    figures['noeviction at maxmemory: requests'] = keys.length
    figures['noeviction at maxmemory: answers'] = tally(answers.map(statusOf))
    figures['noeviction at maxmemory: (answer, executions, record state)'] = tally(
      rows.map((row) => `${row.answer.status}/${row.executions}/${row.state ?? 'none'}`),
    )
    figures['noeviction at maxmemory: refused keys retried after memory freed'] = tally(retried.map(statusOf))
    expect(answers.some((a) => a.status === 201)).toBe(true)
    expect(answers.some((a) => a.status === 503)).toBe(true)
    expect(
      answers.every((a) => a.status === 201 || (a.status === 503 && a.code === 'IDEMPOTENCY_STORE_UNAVAILABLE')),
    ).toBe(true)
    for (const row of rows) {
      expect(row.executions).toBeLessThanOrEqual(1)
      // Nothing runs unrecorded: a refused claim runs nothing, and an admitted one always gets
      // its completion stored (transitions run with allow-oom), so every run is a stored 201.
      if (row.executions === 1) expect(row).toMatchObject({ answer: { status: 201 }, state: 'COMPLETED' })
      if (row.answer.status === 503) expect(row).toMatchObject({ executions: 0, state: null })
    }
    expect(retried.every((a) => a.status === 201 && !a.replayed)).toBe(true)
  })

  it('reports the figures', (context) => {
    recordFigures(context, '9', 'eviction policy check and noeviction at maxmemory', figures)
    expect(Object.keys(figures).length).toBeGreaterThanOrEqual(6)
  })
})
