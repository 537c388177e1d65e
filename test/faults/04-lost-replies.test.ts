/**
 * Fault 4: Redis paused (SIGSTOP longer than the client's command timeout, then SIGCONT) at
 * claim and at complete, and the proxy between app and Redis losing replies (drop-replies),
 * losing commands (blackhole), cutting connections and delaying bytes, at both points. For
 * every scenario: at most one execution per key, no request past its deadline, and the record
 * settles: a retry then gets a final answer (the stored response, a first run, or
 * recovery-required when the outcome of the one run could not be recorded), never 409.
 */
import { randomUUID } from 'node:crypto'
import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import {
  type Answer,
  post,
  readRecord,
  recordKey,
  redisReady,
  sleep,
  startFaultApp,
  until,
} from '../helpers/fault-app.js'
import { type FaultRedis, startFaultRedis } from '../helpers/fault-redis.js'
import { recordFigures } from '../helpers/figures.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'

const COMMAND_TIMEOUT_MS = 500
const LEASE_MS = 2_000
/** Longer than the command timeout, shorter than the lease. */
const FAULT_MS = 1_500
const DEADLINE_MS = 15_000

interface Scenario {
  readonly name: string
  /** Where the fault hits: before the claim is sent, or while the handler runs (so at complete). */
  readonly at: 'claim' | 'complete'
  begin(): void
  end(): void
}

interface Result {
  readonly name: string
  readonly first: Answer
  readonly executionsAfterFault: number
  readonly settledAs: string
  readonly retry: Answer
  readonly executions: number
}

describe('fault 4: Redis paused and replies lost at claim and at complete', () => {
  let redis: FaultRedis
  let admin: Redis
  let proxy: TcpProxy
  let app: AppProcess
  let log: ExecutionLog
  const results: Result[] = []

  beforeAll(async () => {
    redis = await startFaultRedis()
    admin = redis.admin()
    proxy = await startTcpProxy(redis.port)
    log = createExecutionLog()
    app = await startFaultApp({
      REDIS_URL: proxy.url,
      EXECUTION_LOG: log.path,
      REDIS_COMMAND_TIMEOUT_MS: String(COMMAND_TIMEOUT_MS),
      IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
    })
  })

  afterAll(async () => {
    await app.stop()
    await proxy.close()
    await redis.stop()
    log.remove()
  })

  /** The record's state, or `settled` once nothing holds a live lease on it. */
  async function settled(key: string): Promise<string | undefined> {
    const record = await readRecord(admin, recordKey('fault4', key))
    if (record === undefined) return 'absent'
    const { state, leaseUntil } = record
    if (state !== 'CLAIMED' && state !== 'EXECUTING') return state
    const [seconds, micros] = await admin.time()
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
    return Number(leaseUntil) <= now ? `${state} (lease ran out)` : undefined
  }

  async function run(scenario: Scenario): Promise<Result> {
    const key = randomUUID()
    const body = { item: scenario.name, qty: 1, delayMs: scenario.at === 'complete' ? 400 : 0 }
    await redisReady(app)

    if (scenario.at === 'claim') scenario.begin()
    const pending = post(app.url, { user: 'fault4', key, body, deadlineMs: DEADLINE_MS })
    if (scenario.at === 'complete') {
      await until('the handler to start', () => (log.executions((e) => e.key === key).length > 0 ? true : undefined))
      scenario.begin()
    }
    await sleep(FAULT_MS)
    scenario.end()
    const first = await pending
    const executionsAfterFault = log.executions((e) => e.key === key).length
    const settledAs = await until(`the record of ${scenario.name} to settle`, () => settled(key), LEASE_MS + 5_000, 50)
    await redisReady(app)
    const retry = await post(app.url, { user: 'fault4', key, body, deadlineMs: DEADLINE_MS })
    const result = {
      name: scenario.name,
      first,
      executionsAfterFault,
      settledAs,
      retry,
      executions: log.executions((e) => e.key === key).length,
    }
    results.push(result)
    return result
  }

  const pause = (at: 'claim' | 'complete'): Scenario => ({
    name: `SIGSTOP ${FAULT_MS} ms at ${at}`,
    at,
    begin: () => redis.pause(),
    end: () => redis.resume(),
  })
  const proxied = (mode: 'drop-replies' | 'blackhole' | 'cut', at: 'claim' | 'complete'): Scenario => ({
    name: `${mode} at ${at}`,
    at,
    begin: () => proxy.setMode(mode),
    end: () => proxy.setMode('pass'),
  })
  const delayed: Scenario = {
    name: `delay 100 ms each way (under the timeout) at claim`,
    at: 'claim',
    begin: () => proxy.setMode('delay', { delayMs: 100 }),
    end: () => proxy.setMode('pass'),
  }
  const scenarios = [
    pause('claim'),
    pause('complete'),
    proxied('drop-replies', 'claim'),
    proxied('drop-replies', 'complete'),
    proxied('blackhole', 'claim'),
    proxied('blackhole', 'complete'),
    proxied('cut', 'claim'),
    proxied('cut', 'complete'),
    delayed,
  ]

  it.each(scenarios.map((scenario) => [scenario.name, scenario] as const))(
    'runs at most once and settles with %s',
    async (_name, scenario) => {
      const result = await run(scenario)

      const { first, retry } = result
      expect(first.timedOut).toBeUndefined()
      expect(retry.timedOut).toBeUndefined()
      expect(result.executionsAfterFault).toBeLessThanOrEqual(1)
      expect(result.executions).toBeLessThanOrEqual(1)
      expect([201, 503]).toContain(first.status)
      if (first.status === 201) {
        // The answer given is the answer kept.
        expect(retry).toMatchObject({ status: 201, replayed: true, body: first.body })
      } else if (retry.status === 201) {
        // Undecided first time: the retry ran it (the first never did) or replays the one run.
        expect(result.executions).toBe(1)
        if (!retry.replayed) expect(result.executionsAfterFault).toBe(0)
      } else {
        // The one run's outcome could not be recorded: its effect may have happened.
        expect(retry).toMatchObject({ status: 503, code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
        expect(result.executions).toBe(1)
      }
      if (scenario === delayed) expect(first).toMatchObject({ status: 201, replayed: false })
    },
  )

  it('reports the scenarios', (context) => {
    const describe = (a: Answer) => `${a.status}${a.replayed ? ' replay' : ''}${a.code ? ` ${a.code}` : ''}`
    const values: Record<string, string | number> = {}
    for (const r of results) {
      values[r.name] =
        `first ${describe(r.first)}; settled ${r.settledAs}; retry ${describe(r.retry)}; executions ${r.executions}`
    }
    values['proxy bytes dropped (replies / commands)'] = `${proxy.stats.dropped} / ${proxy.stats.blackholed}`
    values['proxy connections reset'] = proxy.stats.resets
    recordFigures(context, '4', 'Redis paused, replies and commands lost, at claim and at complete', values)

    expect(results).toHaveLength(scenarios.length)
    expect(results.every((r) => r.executions <= 1)).toBe(true)
  })
})
