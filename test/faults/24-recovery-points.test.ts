/**
 * Fault 24: recovery points on PostgreSQL. POST /transfers of the fault app (apps/transfers.ts,
 * `transaction: true`, `resume: true`) runs two steps, `reserve` and `charge`, each committed
 * with its recovery point, then writes a `final` row that commits with the answer; every row
 * carries the fencing token that wrote it. Two app processes on the suite's cluster, a 1.5 s
 * lease:
 * - SIGKILLed right after `reserve` committed, then right after `charge` committed: the retry on
 *   the other process (after the lease) runs only what is left; each step's row is there once,
 *   written by the execution that committed it; the answer carries the first execution's step
 *   results, and replays byte for byte;
 * - a stale owner paused (SIGSTOP) inside `charge`, past its lease, its session kept open: the
 *   other process takes over and finishes; the first resumes, its step is refused by the fence
 *   and rolls back, and its client gets no 2xx.
 * The table `fault_steps` is read directly: it holds a row exactly when a step's effect happened.
 */
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, sleep, startFaultApp, until } from '../helpers/fault-app.js'
import { recordFigures } from '../helpers/figures.js'

const LEASE_MS = 1_500

async function transfer(app: AppProcess, user: string, key: string, headers: Record<string, string> = {}) {
  try {
    const response = await fetch(`${app.url}/transfers`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${user}`,
        'content-type': 'application/json',
        'idempotency-key': key,
        ...headers,
      },
      body: JSON.stringify({ account: 'account-1', amount: 10 }),
      signal: AbortSignal.timeout(30_000),
    })
    const bytes = Buffer.from(await response.arrayBuffer())
    const problem = (response.headers.get('content-type') ?? '').startsWith('application/problem+json')
    return {
      status: response.status,
      replayed: response.headers.get('idempotent-replayed') === 'true',
      retryAfter: response.headers.get('retry-after'),
      body: bytes.toString(),
      bytes,
      code: problem ? (JSON.parse(bytes.toString()) as { code?: string }).code : undefined,
    } satisfies Answer & { bytes: Buffer }
  } catch {
    return { status: 0, replayed: false, retryAfter: null, body: '', bytes: Buffer.alloc(0), code: undefined }
  }
}

describe('fault 24: recovery points on PostgreSQL', () => {
  let a: AppProcess
  let b: AppProcess
  let admin: pg.Client
  let log: ExecutionLog
  const env = (extra: Record<string, string> = {}) => ({
    DATABASE_URL: inject('postgresUrl'),
    EXECUTION_LOG: log.path,
    IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
    ...extra,
  })

  beforeAll(async () => {
    log = createExecutionLog()
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    // The paused owner's session outlives its pause: the fence, not the server's idle timeout,
    // refuses its step.
    ;[a, b] = await Promise.all([startFaultApp(env({ PG_TRANSACTION_IDLE_TIMEOUT_MS: '60000' })), startFaultApp(env())])
  })

  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()])
    await admin?.end()
    log.remove()
  })

  /** The effect rows of one transfer: `step:token` in the order written. */
  async function effects(user: string, key: string): Promise<string[]> {
    const { rows } = await admin.query<{ step: string; token: number }>(
      'SELECT step, token FROM fault_steps WHERE principal = $1 AND key = $2 ORDER BY id',
      [user, key],
    )
    return rows.map((row) => `${row.step}:${row.token}`)
  }

  /** Retries until the answer is not a 409 (the killed run's lease still running), at most 20 s. */
  async function settle(app: AppProcess, user: string, key: string) {
    for (let tries = 1; ; tries++) {
      const answer = await transfer(app, user, key)
      if (answer.status !== 409 || tries > 100) return { answer, tries }
      await sleep(200)
    }
  }

  const executions = (user: string) => log.entries().filter((e) => e.type === 'execution' && e.user === user).length

  it.for([
    ['after-reserve', ['reserve:1', 'charge:2', 'final:2']],
    ['after-charge', ['reserve:1', 'charge:1', 'final:2']],
  ] as const)(
    'SIGKILLed %s committed: the retry runs only the rest, each effect once',
    async ([point, expected], context) => {
      const user = `f24-${randomUUID().slice(0, 8)}`
      const key = randomUUID()
      const killed = await transfer(a, user, key, { 'x-crash-at': point })
      expect(killed.status).toBe(0)
      const restarted = startFaultApp(env({ PG_TRANSACTION_IDLE_TIMEOUT_MS: '60000' }))
      const before = await effects(user, key)

      const started = performance.now()
      const { answer, tries } = await settle(b, user, key)
      const resumedMs = Math.round(performance.now() - started)
      const replays = [await transfer(b, user, key), await transfer(b, user, key)]
      a = await restarted
      const after = await effects(user, key)
      recordFigures(context, '24', `SIGKILL ${point}`, {
        'rows before the retry': before.join(' '),
        'retry: answer after ms': resumedMs,
        'retry: tries (409 before the lease ran out)': tries,
        'rows after': after.join(' '),
        executions: executions(user),
      })

      // What the killed execution committed is there before the retry: its steps only.
      expect(before).toEqual(expected.filter((row) => row.endsWith(':1')))
      expect(answer).toMatchObject({ status: 201, replayed: false })
      expect(after).toEqual(expected)
      expect(executions(user)).toBe(2)
      // The re-run got the committed steps' results back: the ids and tokens of the first execution.
      const body = JSON.parse(answer.body) as { reserve: { token: number }; charge: { token: number }; token: number }
      expect(body.token).toBe(2)
      expect(body.reserve.token).toBe(1)
      expect(body.charge.token).toBe(point === 'after-charge' ? 1 : 2)
      for (const replay of replays) {
        expect(replay).toMatchObject({ status: 201, replayed: true })
        expect(replay.bytes.equals(answer.bytes)).toBe(true)
      }
    },
  )

  it('a stale owner paused inside a step past its lease cannot commit it: refused, rolled back', async (context) => {
    const user = `f24s-${randomUUID().slice(0, 8)}`
    const key = randomUUID()
    const first = transfer(a, user, key, { 'x-hold-in-charge-ms': '2500' })
    await until('the first charge written, not committed', () =>
      log.entries().some((e) => e.type === 'charge-written' && e.user === user) ? true : undefined,
    )
    process.kill(a.pid, 'SIGSTOP')
    let resumed = false
    try {
      await sleep(LEASE_MS + 700)
      const second = await settle(b, user, key)
      process.kill(a.pid, 'SIGCONT')
      resumed = true
      const stale = await first
      const again = await transfer(b, user, key)
      const rows = await effects(user, key)
      recordFigures(context, '24s', 'a stale owner paused inside a step', {
        'second process: answer': `${second.answer.status}`,
        'stale owner, resumed: answer': `${stale.status} ${stale.code ?? ''}`.trim(),
        rows: rows.join(' '),
      })
      expect(second.answer).toMatchObject({ status: 201, replayed: false })
      // Its step's commit refused, the handler stopped: the key's answer is the taker's, so a 503 to retry.
      expect(stale).toMatchObject({ status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
      expect(again).toMatchObject({ status: 201, replayed: true, body: second.answer.body })
      // The first owner's reserve committed (attempt 1); its charge never did: the new owner's only.
      expect(rows).toEqual(['reserve:1', 'charge:2', 'final:2'])
    } finally {
      if (!resumed) process.kill(a.pid, 'SIGCONT')
    }
  })
})
