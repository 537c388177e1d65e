/**
 * Fault 23: exactly once through an ORM's transaction. Deposits on POST /deposits-<orm> (the row
 * and the balance written through the ORM's own transaction object, test/helpers/orm-kits.ts),
 * across two app processes on the suite's cluster with a 1.5 s lease: the app SIGKILLed after the
 * writes and before the commit leaves nothing; after the lease the retry on the other process
 * runs once, and its answer replays byte for byte; the app SIGKILLed after the commit, before the
 * answer left: the retry on the other process replays the killed process's stored answer, byte
 * for byte on every retry, one row per key. Each at READ COMMITTED (/deposits-<orm>) and at
 * REPEATABLE READ (/deposits-<orm>-repeatable-read, the level given to the ORM's own
 * transaction), one kill per level; every answer names the level its transaction ran at.
 * `orm_deposits` and `orm_balances` are read directly.
 */
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { deposit, show } from '../helpers/deposits.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, sleep, startFaultApp, until } from '../helpers/fault-app.js'
import { recordFigures, tally } from '../helpers/figures.js'
import { depositRoute, ISOLATIONS, type Isolation, ORM_KITS } from '../helpers/orm-kits.js'

const LEASE_MS = 1_500
/** Deposits per ORM and level, killed before their commit (23a) and after it (23b). */
const PER_ORM = 10
const AFTER_COMMIT_PER_ORM = 5

/** The level a 2xx answer says its transaction ran at. */
const levelOf = (answer: Answer) => (answer.status === 201 ? JSON.parse(answer.body).isolation : undefined)
/** `n` deposits on every ORM's route at `isolation`, each with a key and an account of its own. */
const depositsOn = (isolation: Isolation, n: number) =>
  ORM_KITS.flatMap(([name]) =>
    Array.from({ length: n }, () => ({ route: depositRoute(name, isolation), key: randomUUID() })),
  )
const LEVEL = { 'read committed': 'READ COMMITTED', 'repeatable read': 'REPEATABLE READ' } as const

describe('fault 23: exactly once through an ORM adapter', () => {
  let a: AppProcess
  let b: AppProcess
  let admin: pg.Client
  let log: ExecutionLog
  const env = () => ({
    DATABASE_URL: inject('postgresUrl'),
    EXECUTION_LOG: log.path,
    IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
    PG_POOL_MAX: '70',
  })

  beforeAll(async () => {
    log = createExecutionLog()
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    await admin.connect()
    ;[a, b] = await Promise.all([startFaultApp(env()), startFaultApp(env())])
  })

  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()])
    await admin?.end()
    log.remove()
  })

  /** An account per deposit: each one's row lock is held until its transaction ends. */
  const accountOf = (key: string) => `acct-${key}`

  /** Opens each trial's account with a balance of 0. */
  const openAccounts = (trials: readonly { key: string }[]) =>
    admin.query('INSERT INTO orm_balances (account, balance) SELECT unnest($1::text[]), 0', [
      trials.map(({ key }) => accountOf(key)),
    ])

  /** What the database kept for `user`'s trials: deposit rows per key, each account's balance. */
  const ledger = async (user: string, trials: readonly { key: string }[]) => {
    const { rows } = await admin.query<{ key: string; n: number }>(
      'SELECT key, count(*)::int AS n FROM orm_deposits WHERE principal = $1 GROUP BY key',
      [user],
    )
    const perKey = new Map(rows.map((row) => [row.key, row.n]))
    const balances = await admin.query<{ balance: number }>(
      'SELECT balance FROM orm_balances WHERE account = ANY($1::text[])',
      [trials.map(({ key }) => accountOf(key))],
    )
    return {
      rowsPerKey: trials.map(({ key }) => perKey.get(key) ?? 0),
      balances: balances.rows.map((row) => row.balance),
    }
  }

  it.for(ISOLATIONS)(
    'SIGKILL between the writes and the commit, %s: nothing kept; after the lease the retry runs once and replays',
    { timeout: 120_000 },
    async (isolation, context) => {
      const user = `f23-${randomUUID().slice(0, 8)}`
      const trials = depositsOn(isolation, PER_ORM)
      await openAccounts(trials)
      const killed = trials.map(({ route, key }) =>
        deposit(a, { user, key, route, holdMs: 20_000, balance: accountOf(key) }),
      )
      const written = () => log.entries().filter((e) => e.type === 'written' && e.user === user).length
      await until(
        'every deposit written, before its commit',
        () => (written() === trials.length ? true : undefined),
        30_000,
      )
      const rowsBefore = await admin.query('SELECT count(*)::int AS n FROM orm_deposits WHERE principal = $1', [user])
      await a.stop('SIGKILL')
      const lost = await Promise.all(killed)
      const restarted = startFaultApp(env())

      /**
       * Sends until the answer is neither a 409 (the lease still running) nor a 503 of the store
       * (nothing ran: no connection or transaction in time on the loaded machine, which a client
       * retries too); the 503s are counted.
       */
      const unavailable: string[] = []
      const settle = async (route: string, key: string) => {
        for (let tries = 1; ; tries++) {
          const answer = await deposit(b, { user, key, route, balance: accountOf(key) })
          if (answer.status === 503 && answer.code === 'IDEMPOTENCY_STORE_UNAVAILABLE') unavailable.push(route)
          else if (answer.status !== 409 || tries > 75) return answer
          await sleep(200)
        }
      }
      const retried = await Promise.all(trials.map(({ route, key }) => settle(route, key)))
      const replays = await Promise.all(
        trials.map(({ route, key }) => deposit(b, { user, key, route, balance: accountOf(key) })),
      )
      a = await restarted
      const kept = await ledger(user, trials)

      recordFigures(context, '23a', `SIGKILL between the ORM writes and the commit, ${LEVEL[isolation]}`, {
        trials: `${trials.length} (${PER_ORM} per ORM: ${ORM_KITS.map(([name]) => name).join(', ')})`,
        'answers of the killed requests': tally(lost.map(show)),
        'rows before the kill': rowsBefore.rows[0].n,
        'retry answers': tally(retried.map(show)),
        'level the retries ran at': tally(retried.map((answer) => String(levelOf(answer)))),
        '503 (store unavailable) answers retried, by route': tally(unavailable),
        'then, again': tally(replays.map(show)),
        'rows per key': tally(kept.rowsPerKey.map(String)),
        balances: tally(kept.balances.map(String)),
      })
      expect(lost.every((answer) => answer.status === 0)).toBe(true)
      expect(rowsBefore.rows[0].n).toBe(0)
      for (const answer of retried) expect(answer).toMatchObject({ status: 201, replayed: false })
      expect(retried.map(levelOf)).toEqual(trials.map(() => isolation))
      trials.forEach((_, i) => {
        expect(replays[i]).toMatchObject({ status: 201, replayed: true, body: retried[i]?.body })
      })
      expect(kept.rowsPerKey).toEqual(trials.map(() => 1))
      expect(kept.balances).toEqual(trials.map(() => 10))
    },
  )

  it.for(ISOLATIONS)(
    'SIGKILL after the commit, before the answer left, %s: every retry replays the stored answer, one row per key',
    { timeout: 120_000 },
    async (isolation, context) => {
      const user = `f23b-${randomUUID().slice(0, 8)}`
      const trials = depositsOn(isolation, AFTER_COMMIT_PER_ORM)
      await openAccounts(trials)
      const killedPid = a.pid
      const killed = trials.map(({ route, key }) =>
        deposit(a, { user, key, route, holdAfterCommitMs: 20_000, balance: accountOf(key) }),
      )
      const committed = () => log.entries().filter((e) => e.type === 'committed' && e.user === user).length
      await until(
        'every deposit committed, its answer not yet sent',
        () => (committed() === trials.length ? true : undefined),
        30_000,
      )
      await a.stop('SIGKILL')
      const lost = await Promise.all(killed)
      const restarted = startFaultApp(env())
      const retried = await Promise.all(
        trials.map(({ route, key }) => deposit(b, { user, key, route, balance: accountOf(key) })),
      )
      const again = await Promise.all(
        trials.map(({ route, key }) => deposit(b, { user, key, route, balance: accountOf(key) })),
      )
      a = await restarted
      const kept = await ledger(user, trials)
      const answeredBy = retried.map((answer) => (answer.status === 201 ? JSON.parse(answer.body).pid : undefined))

      recordFigures(context, '23b', `SIGKILL after the ORM commit, before the answer left, ${LEVEL[isolation]}`, {
        trials: `${trials.length} (${AFTER_COMMIT_PER_ORM} per ORM: ${ORM_KITS.map(([name]) => name).join(', ')})`,
        'answers of the killed requests': tally(lost.map(show)),
        'retry answers': tally(retried.map(show)),
        'level the stored answers ran at': tally(retried.map((answer) => String(levelOf(answer)))),
        'then, again': tally(again.map(show)),
        'retries answering the killed process answer': answeredBy.filter((pid) => pid === killedPid).length,
        'rows per key': tally(kept.rowsPerKey.map(String)),
        balances: tally(kept.balances.map(String)),
      })
      expect(lost.every((answer) => answer.status === 0)).toBe(true)
      trials.forEach((_, i) => {
        expect(retried[i]).toMatchObject({ status: 201, replayed: true })
        expect(again[i]).toMatchObject({ status: 201, replayed: true, body: retried[i]?.body })
      })
      // The stored answer is the killed process's: nothing ran again.
      expect(answeredBy).toEqual(trials.map(() => killedPid))
      expect(retried.map(levelOf)).toEqual(trials.map(() => isolation))
      expect(kept.rowsPerKey).toEqual(trials.map(() => 1))
      expect(kept.balances).toEqual(trials.map(() => 10))
    },
  )
})
