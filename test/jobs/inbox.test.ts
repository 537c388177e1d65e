/**
 * An inbox on PostgreSQL: a consumer process whose effect is a write to the store's database,
 * through `idempotent()` with `transaction: true`, SIGKILLed between its write and the commit;
 * the message delivered again to a second consumer (as a queue redelivers an unacknowledged
 * message, after each `retryAfterMs` the consumer answers) is applied exactly once. The same with
 * `transaction: <ORM adapter>` for every ORM of test/helpers/orm-kits.ts, the writes made through
 * the ORM's own transaction object.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import type pg from 'pg'
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest'
import { createDepositTables, ORM_KITS } from '../helpers/orm-kits.js'
import { sleep } from '../helpers/sleep.js'
import { testPostgresPool } from '../helpers/stores.js'

const SECRET = randomBytes(32).toString('hex')
const CONSUMER_APP = 'test/jobs/apps/inbox-consumer.ts'

interface Consumer {
  readonly child: ChildProcess
  output(): string
  /** Resolves with the first line after `from` (an output offset) that matches `pattern`. */
  line(pattern: RegExp, from?: number, ms?: number): Promise<RegExpExecArray>
  deliver(message: object): void
  kill(): Promise<void>
}

async function startConsumer(env: Record<string, string> = {}): Promise<Consumer> {
  const child = spawn(process.execPath, ['--import', 'tsx', CONSUMER_APP], {
    env: { ...process.env, DATABASE_URL: inject('postgresUrl'), IDEMPOTENCY_SECRET: SECRET, LEASE_MS: '1000', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  child.stderr?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const consumer: Consumer = {
    child,
    output: () => output,
    async line(pattern, from = 0, ms = 60_000) {
      const deadline = Date.now() + ms
      for (;;) {
        const found = new RegExp(pattern.source, 'm').exec(output.slice(from))
        if (found !== null) return found
        if (child.exitCode !== null || child.signalCode !== null) throw new Error(`the consumer exited: ${output}`)
        if (Date.now() > deadline) throw new Error(`no line ${pattern} within ${ms} ms: ${output}`)
        await sleep(20)
      }
    },
    deliver(message) {
      child.stdin?.write(`${JSON.stringify(message)}\n`)
    },
    async kill() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL')
        await exited
      }
    },
  }
  await consumer.line(/^ready$/)
  return consumer
}

/**
 * Delivers `message` to `consumer` until it is acknowledged (`ok`), waiting each answer's
 * `retryAfterMs` in between, as a queue does; the answers, in order.
 */
async function deliverUntilAcknowledged(
  consumer: Consumer,
  message: { id: string; account: string; amount: number },
): Promise<string[]> {
  const answers: string[] = []
  const deadline = Date.now() + 60_000
  for (;;) {
    const from = consumer.output().length
    consumer.deliver(message)
    const answer = await consumer.line(new RegExp(`^(ok|error) ${message.id} (.*)$`), from)
    answers.push(answer[0])
    if (answer[1] === 'ok') return answers
    const retryAfterMs = Number(answer[2]?.split(' ')[1] ?? 0)
    if (Date.now() > deadline) throw new Error(`not acknowledged within 60 s: ${answers.join('\n')}`)
    await sleep(Math.max(retryAfterMs, 50))
  }
}

describe('an inbox on PostgreSQL: idempotent() with transaction: true', () => {
  let pool: pg.Pool
  const consumers: Consumer[] = []

  beforeEach(async () => {
    pool = testPostgresPool()
    await pool.query('TRUNCATE idemkit_records')
    await pool.query(
      'CREATE TABLE IF NOT EXISTS inbox_deposits (message_id text, account text, amount int, token int); TRUNCATE inbox_deposits',
    )
    await pool.query(
      'CREATE TABLE IF NOT EXISTS inbox_accounts (id text PRIMARY KEY, balance int NOT NULL); TRUNCATE inbox_accounts',
    )
    await pool.query("INSERT INTO inbox_accounts VALUES ('acc-1', 0)")
  })

  afterEach(async () => {
    for (const consumer of consumers.splice(0)) await consumer.kill()
    await pool.query('DROP TABLE IF EXISTS inbox_deposits, inbox_accounts')
    await pool.end()
  })

  it('a consumer killed between its write and the commit: the redelivered message is applied once', async () => {
    const first = await startConsumer({ HANG_ON: 'm-1' })
    consumers.push(first)
    first.deliver({ id: 'm-1', account: 'acc-1', amount: 5 })
    await first.line(/^written m-1$/)
    // Written, not committed: no other session sees the row.
    expect((await pool.query('SELECT count(*)::int AS n FROM inbox_deposits')).rows[0].n).toBe(0)
    await first.kill()

    const second = await startConsumer()
    consumers.push(second)
    const answers = await deliverUntilAcknowledged(second, { id: 'm-1', account: 'acc-1', amount: 5 })
    const again = await deliverUntilAcknowledged(second, { id: 'm-1', account: 'acc-1', amount: 5 })

    // Until the dead consumer's lease ran out the key was in progress; then the second consumer
    // took it over (its writes certainly did not commit) and ran it with fencing token 2.
    expect(answers.at(-1)).toBe('ok m-1 {"balance":5,"token":2}')
    expect(answers.slice(0, -1).every((answer) => answer.startsWith('error m-1 ERR_IDEM_IN_PROGRESS '))).toBe(true)
    expect(again).toEqual(['ok m-1 {"balance":5,"token":2}'])
    expect((await pool.query('SELECT message_id, account, amount, token FROM inbox_deposits')).rows).toEqual([
      { message_id: 'm-1', account: 'acc-1', amount: 5, token: 2 },
    ])
    expect((await pool.query("SELECT balance FROM inbox_accounts WHERE id = 'acc-1'")).rows[0].balance).toBe(5)

    const next = await deliverUntilAcknowledged(second, { id: 'm-2', account: 'acc-1', amount: 7 })
    expect(next).toEqual(['ok m-2 {"balance":12,"token":1}'])
  }, 180_000)
})

describe.each(ORM_KITS.map(([name]) => name))('an inbox on an ORM: idempotent() with the %s adapter', (name) => {
  let pool: pg.Pool
  const consumers: Consumer[] = []

  beforeEach(async () => {
    pool = testPostgresPool()
    await createDepositTables(pool)
  })

  afterEach(async () => {
    for (const consumer of consumers.splice(0)) await consumer.kill()
    await pool.end()
  })

  it('a consumer killed between its ORM writes and the commit: the redelivered message is applied once', async () => {
    const account = `acct-${randomUUID()}`
    await pool.query('INSERT INTO orm_balances (account, balance) VALUES ($1, 0)', [account])
    const message = { id: `m-${randomUUID()}`, account, amount: 5 }
    const rows = () =>
      pool.query('SELECT key, amount, token FROM orm_deposits WHERE account = $1', [account]).then((r) => r.rows)

    const first = await startConsumer({ ORM: name, HANG_ON: message.id })
    consumers.push(first)
    first.deliver(message)
    await first.line(new RegExp(`^written ${message.id}$`))
    // Written through the ORM's transaction, not committed: no other session sees the row.
    expect(await rows()).toEqual([])
    await first.kill()

    const second = await startConsumer({ ORM: name })
    consumers.push(second)
    const answers = await deliverUntilAcknowledged(second, message)
    const again = await deliverUntilAcknowledged(second, message)

    // In progress until the dead consumer's lease ran out; then taken over (its writes certainly
    // did not commit) and run once, with fencing token 2.
    const done = `ok ${message.id} {"balance":5,"token":2}`
    expect(answers.at(-1)).toBe(done)
    expect(answers.slice(0, -1).every((answer) => answer.startsWith(`error ${message.id} ERR_IDEM_IN_PROGRESS `))).toBe(
      true,
    )
    expect(again).toEqual([done])
    expect(await rows()).toEqual([{ key: message.id, amount: 5, token: 2 }])
    expect((await pool.query('SELECT balance FROM orm_balances WHERE account = $1', [account])).rows).toEqual([
      { balance: 5 },
    ])
  }, 180_000)
})
