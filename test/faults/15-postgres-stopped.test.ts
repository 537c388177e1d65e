/**
 * Fault 15: the PostgreSQL server stopped (immediate shutdown, as `pg_ctl stop -m immediate`)
 * when requests arrive to claim: 503 store-unavailable with Retry-After and the handler not
 * run; after a restart on the same data, each key runs exactly once and then replays.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { post, startFaultApp } from '../helpers/fault-app.js'
import { type FaultPostgres, startFaultPostgres } from '../helpers/fault-postgres.js'
import { recordFigures, tally } from '../helpers/figures.js'

const KEYS = 20

describe('fault 15: PostgreSQL stopped at claim', () => {
  let postgres: FaultPostgres
  let app: AppProcess
  let log: ExecutionLog

  beforeAll(async () => {
    postgres = await startFaultPostgres()
    log = createExecutionLog()
    app = await startFaultApp({ DATABASE_URL: postgres.url, EXECUTION_LOG: log.path })
  })

  afterAll(async () => {
    await app.stop()
    await postgres.stop()
    log.remove()
  })

  it('answers 503 with Retry-After and runs nothing while PostgreSQL is down, then runs each key once', async (context) => {
    const user = 'fault15'
    const keys = Array.from({ length: KEYS }, () => randomUUID())
    const body = { item: 'book', qty: 1 }
    // A first request opens pool connections, so the stop also drops live ones.
    expect((await post(app.url, { user, key: 'warm-up', body })).status).toBe(201)
    await postgres.stopImmediate()

    const started = Date.now()
    const down = await Promise.all(keys.map((key) => post(app.url, { user, key, body, deadlineMs: 10_000 })))
    const downMs = Date.now() - started
    const executionsWhileDown = log.executions().length - 1
    await postgres.restart()
    const first = await Promise.all(keys.map((key) => post(app.url, { user, key, body })))
    const again = await Promise.all(keys.map((key) => post(app.url, { user, key, body })))
    const counts = log.countsByScope()

    recordFigures(context, '15', 'PostgreSQL stopped at claim, then restarted', {
      'requests while down': KEYS,
      'answers while down': tally(down.map((a) => `${a.status} ${a.code ?? ''} retry-after=${a.retryAfter}`)),
      'all answered within ms': downMs,
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
