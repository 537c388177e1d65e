/**
 * Fault 25: a stale owner's transaction cannot commit through any transaction adapter. Deposits
 * on the fault app's POST /deposits (`transaction: true`, the store's own connection) and POST
 * /deposits-<orm> (every ORM adapter of test/helpers/orm-kits.ts), all with
 * `expiredExecution: 'takeover'`, a 1.5 s lease. The first process writes each deposit and is
 * paused (SIGSTOP) past its lease, before its commit; the other process takes every key over
 * (fencing token 2) and commits; then the first is resumed (SIGCONT):
 * - its session kept open (`transactionIdleTimeoutMs` 60 s): the completion it sends through the
 *   adapter's port is refused by the fence (another owner, another attempt), its transaction
 *   rolls back, and its client gets 503;
 * - its session left to the server's `idle_in_transaction_session_timeout` (the lease), holding
 *   the account's row lock: the server ends the paused session, the taker's UPDATE of the same
 *   row goes through, and the first one's ORM finds its connection gone: 503.
 * Either way each key has one deposit, the taker's (its token and pid), the balance moved once,
 * and the answer replayed is the taker's. The tables are read directly. The fault app's pool
 * gives every connection an 'error' listener (docs/postgresql.md "With an ORM"): without it,
 * Drizzle's and Kysely's transaction connection, checked out with none, throws from its emitter
 * when the ended session is noticed on resume, and the whole paused process exits.
 */
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { deposit, show } from '../helpers/deposits.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, sleep, startFaultApp, until } from '../helpers/fault-app.js'
import { recordFigures, tally } from '../helpers/figures.js'
import { ORM_KITS } from '../helpers/orm-kits.js'

const LEASE_MS = 1_500
/** The raw pg route and every ORM's. */
const ROUTES = ['/deposits', ...ORM_KITS.map(([name]) => `/deposits-${name}`)]

describe('fault 25: a stale owner cannot commit through any transaction adapter', () => {
  let kept: AppProcess
  let ended: AppProcess
  let taker: AppProcess
  let admin: pg.Client
  let log: ExecutionLog
  const env = (extra: Record<string, string> = {}) => ({
    DATABASE_URL: inject('postgresUrl'),
    EXECUTION_LOG: log.path,
    IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
    DEPOSITS_EXPIRED_EXECUTION: 'takeover',
    PG_POOL_MAX: '30',
    ...extra,
  })

  beforeAll(async () => {
    log = createExecutionLog()
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    ;[kept, ended, taker] = await Promise.all([
      // The paused owner's session outlives its pause: the fence, not the server, refuses it.
      startFaultApp(env({ PG_TRANSACTION_IDLE_TIMEOUT_MS: '60000' })),
      startFaultApp(env()),
      startFaultApp(env()),
    ])
  }, 120_000)

  afterAll(async () => {
    await Promise.all([kept?.stop(), ended?.stop(), taker?.stop()])
    await admin?.end()
    log.remove()
  })

  /** The deposit rows of `user`'s `key` on `route`: its token and the pid that wrote it. */
  async function rowsOf(route: string, user: string, key: string): Promise<{ token: number; pid: number }[]> {
    const table = route === '/deposits' ? 'fault_deposits' : 'orm_deposits'
    const { rows } = await admin.query<{ token: number; pid: number }>(
      `SELECT token, pid FROM ${table} WHERE route = $1 AND principal = $2 AND key = $3`,
      [route, user, key],
    )
    return rows
  }

  /** The balance of `account` on `route`'s table. */
  async function balanceOf(route: string, account: string): Promise<number | undefined> {
    const table = route === '/deposits' ? 'fault_balances' : 'orm_balances'
    const { rows } = await admin.query<{ balance: number }>(`SELECT balance FROM ${table} WHERE account = $1`, [
      account,
    ])
    return rows[0]?.balance
  }

  /** Sends until the answer is neither 409 (the lease still running) nor 503 (nothing done), at most 40 s. */
  async function settle(route: string, user: string, key: string, account: string): Promise<Answer> {
    const deadline = Date.now() + 40_000
    for (;;) {
      const answer = await deposit(taker, { user, key, route, balance: account })
      if ((answer.status !== 409 && answer.status !== 503) || Date.now() > deadline) return answer
      await sleep(200)
    }
  }

  /**
   * Every route's deposit on `stale`, written and then paused past the lease; the taker takes
   * each over and commits; `stale` resumed. Per route: the taker's answer, the stale one's, a
   * replay, the rows and the balance.
   */
  async function pausedPastTheLease(stale: AppProcess, user: string, accounts: 'none' | 'locked') {
    const trials = ROUTES.map((route) => {
      const key = randomUUID()
      return { route, key, account: `acct-${key}` }
    })
    if (accounts === 'locked') {
      const ids = trials.map(({ account }) => account)
      await admin.query('INSERT INTO fault_balances (account, balance) SELECT unnest($1::text[]), 0', [ids])
      await admin.query('INSERT INTO orm_balances (account, balance) SELECT unnest($1::text[]), 0', [ids])
    }
    const first = trials.map(({ route, key, account }) =>
      deposit(stale, { user, key, route, holdMs: 3_000, balance: account, deadlineMs: 120_000 }),
    )
    const written = () => log.entries().filter((e) => e.type === 'written' && e.user === user).length
    await until('every first deposit written', () => (written() === trials.length ? true : undefined), 60_000)
    process.kill(stale.pid, 'SIGSTOP')
    const pausedAt = performance.now()
    let resumed = false
    try {
      await sleep(LEASE_MS + 700)
      const taken = await Promise.all(trials.map(({ route, key, account }) => settle(route, user, key, account)))
      const takenAfterMs = Math.round(performance.now() - pausedAt)
      process.kill(stale.pid, 'SIGCONT')
      resumed = true
      const stales = await Promise.all(first)
      const replays = await Promise.all(
        trials.map(({ route, key, account }) => deposit(taker, { user, key, route, balance: account })),
      )
      const rows = await Promise.all(trials.map(({ route, key }) => rowsOf(route, user, key)))
      const balances = await Promise.all(trials.map(({ route, account }) => balanceOf(route, account)))
      return { trials, taken, takenAfterMs, stales, replays, rows, balances }
    } finally {
      if (!resumed) process.kill(stale.pid, 'SIGCONT')
    }
  }

  it('its session kept open: the completion through the port is fenced off, the transaction rolls back', async (context) => {
    const user = `f25k-${randomUUID().slice(0, 8)}`
    const run = await pausedPastTheLease(kept, user, 'none')
    const { trials, taken, stales, replays, rows } = run

    recordFigures(context, '25a', 'a stale owner (session kept open) resumed after a takeover, per adapter', {
      routes: trials.map(({ route }) => route).join(', '),
      'taker: answers': tally(taken.map(show)),
      'taken over after the pause (ms)': run.takenAfterMs,
      'stale owner, resumed: answers': tally(stales.map(show)),
      'then, again': tally(replays.map(show)),
      'rows per key (token)': tally(rows.map((found) => found.map((row) => row.token).join('+') || 'none')),
    })
    trials.forEach(({ route }, i) => {
      const where = `${route}: `
      expect({ where, answer: taken[i] }).toMatchObject({ where, answer: { status: 201, replayed: false } })
      expect({ where, body: JSON.parse(taken[i]?.body ?? '{}') }).toMatchObject({
        where,
        body: { token: 2, pid: taker.pid },
      })
      expect({ where, stale: stales[i] }).toMatchObject({ where, stale: { status: 503 } })
      expect({ where, again: replays[i] }).toMatchObject({
        where,
        again: { status: 201, replayed: true, body: taken[i]?.body },
      })
      expect({ where, rows: rows[i] }).toEqual({ where, rows: [{ token: 2, pid: taker.pid }] })
    })
  }, 180_000)

  it('its session ended by the server while it holds the account row: the taker proceeds, the balance moves once', async (context) => {
    const user = `f25e-${randomUUID().slice(0, 8)}`
    const run = await pausedPastTheLease(ended, user, 'locked')
    const { trials, taken, stales, replays, rows, balances } = run

    recordFigures(context, '25b', 'a stale owner holding a row lock, its session ended by the server, per adapter', {
      routes: trials.map(({ route }) => route).join(', '),
      'taker: answers': tally(taken.map(show)),
      'taken over after the pause (ms)': run.takenAfterMs,
      'stale owner, resumed: answers': tally(stales.map(show)),
      'then, again': tally(replays.map(show)),
      'rows per key (token)': tally(rows.map((found) => found.map((row) => row.token).join('+') || 'none')),
      balances: tally(balances.map(String)),
    })
    trials.forEach(({ route }, i) => {
      const where = `${route}: `
      expect({ where, answer: taken[i] }).toMatchObject({ where, answer: { status: 201, replayed: false } })
      expect({ where, body: JSON.parse(taken[i]?.body ?? '{}') }).toMatchObject({
        where,
        body: { token: 2, pid: taker.pid },
      })
      expect({ where, stale: stales[i] }).toMatchObject({ where, stale: { status: 503 } })
      expect({ where, again: replays[i] }).toMatchObject({
        where,
        again: { status: 201, replayed: true, body: taken[i]?.body },
      })
      expect({ where, rows: rows[i] }).toEqual({ where, rows: [{ token: 2, pid: taker.pid }] })
      expect({ where, balance: balances[i] }).toEqual({ where, balance: 10 })
    })
  }, 180_000)
})
