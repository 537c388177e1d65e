/**
 * Issue 24, finding 7: the `idemkit` command. `redis://host:port/99` (a database the server does
 * not have) silently worked in database 0, and so did an app's store on a client built from
 * such a URL; a refused connection said "may or may not have been applied" with no server and
 * no cause; `list` printed "1000 of 1000 records scanned" when it had stopped at `--limit`; a
 * refusal said "pass force" for `--force`; the key and the principal could only be given on the
 * command line, and a password in `--store` went unremarked. On the suite's redis-server and
 * PostgreSQL, as a child process.
 */
import { spawn } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { freePort } from '../../scripts/redis-server.js'
import { ClaimReply } from '../../src/core/record.js'
import { operationCode, storeKey } from '../../src/core/store-key.js'
import { postgresStore } from '../../src/stores/postgres/index.js'
import { redisStore } from '../../src/stores/redis/index.js'
import { type CliRun, cli } from '../helpers/cli.js'
import { claimRequest, testPostgresPool, testRedisClient } from '../helpers/stores.js'

const SECRET = 'd'.repeat(32)
const ENV = { IDEMPOTENCY_SECRET: SECRET, IDEMKIT_ACTOR: 'oncall' }

// Each command is a child process that loads the sources through tsx: seconds each on a loaded
// machine, so the tests that run several have a generous timeout.

/** `idemkit <args>` with `input` on its stdin. */
function cliWithInput(args: readonly string[], env: Record<string, string>, input: string): Promise<CliRun> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/admin/cli.ts', ...args], {
      env: { PATH: process.env.PATH ?? '', ...env },
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => {
      stdout += chunk
    })
    child.stderr.on('data', (chunk) => {
      stderr += chunk
    })
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }))
    child.stdin.end(input)
  })
}

describe('a Redis database number the server does not have', () => {
  const url99 = () => `${inject('redisUrl')}/99`

  it('is an error for the command, never database 0', async () => {
    const db0 = testRedisClient()
    try {
      await db0.set('idemkit:idem:marker', 'x')
      for (const command of [
        ['list', '--store', url99()],
        ['stats', '--store', url99()],
        ['inspect', '--store', url99(), '--principal', 'p', '--key', 'k', '--operation', 'POST /orders'],
        ['resolve', '--delete', '--store', url99(), '--principal', 'p', '--key', 'k', '--operation', 'POST /orders'],
      ]) {
        const run = await cli(command, ENV)
        expect(run.code, command[0]).toBe(3)
        expect(run.stderr).toMatch(/asks for database 99, but its connection at 127\.0\.0\.1:\d+ is on database 0/)
      }
      expect(await db0.get('idemkit:idem:marker')).toBe('x')
    } finally {
      await db0.del('idemkit:idem:marker')
      db0.disconnect()
    }
  }, 90_000)

  it("is caught by the app's store: verify() throws and claims are refused", async () => {
    const redis = new Redis(url99(), { commandTimeout: 2_000, maxRetriesPerRequest: 1 })
    redis.on('error', () => undefined)
    await new Promise<void>((resolve) => redis.once('ready', () => resolve()))
    const store = redisStore({ redis, onEvent: () => undefined })
    try {
      await expect(store.verify()).rejects.toMatchObject({
        code: 'ERR_IDEM_STORE_MISCONFIGURED',
        message: expect.stringContaining('asks for database 99'),
      })
      await expect(store.claim(claimRequest(store))).rejects.toMatchObject({ code: 'ERR_IDEM_STORE_UNAVAILABLE' })
    } finally {
      await store.close()
      redis.disconnect()
    }
  })

  it('a database the server has works as before', async () => {
    const redis = new Redis(`${inject('redisUrl')}/3`, { commandTimeout: 2_000, maxRetriesPerRequest: 1 })
    await new Promise<void>((resolve) => redis.once('ready', () => resolve()))
    const store = redisStore({ redis, onEvent: () => undefined })
    try {
      await store.verify()
      expect((await store.claim(claimRequest(store))).kind).toBe(ClaimReply.ACQUIRED)
    } finally {
      await redis.flushdb()
      await store.close()
      redis.disconnect()
    }
  })
})

describe('a store that cannot be reached', () => {
  it('names the server and the cause, on every command and both stores', async () => {
    const port = await freePort()
    for (const url of [`redis://127.0.0.1:${port}`, `postgres://postgres@127.0.0.1:${port}/app`]) {
      for (const command of [
        ['stats', '--store', url],
        ['list', '--store', url],
        ['inspect', '--store', url, '--principal', 'p', '--key', 'k', '--operation', 'POST /orders'],
      ]) {
        const run = await cli(command, ENV)
        expect(run.code).toBe(3)
        expect(run.stderr).toContain(
          `cannot connect to ${url.startsWith('redis') ? 'redis' : 'postgres'} 127.0.0.1:${port}/`,
        )
        expect(run.stderr).toContain('ECONNREFUSED')
        expect(run.stderr).not.toContain('may or may not have been applied')
      }
    }
  }, 90_000)
})

describe.each(['redis', 'postgres'] as const)('list at its --limit, on %s', (storeName) => {
  const url = () => inject(storeName === 'redis' ? 'redisUrl' : 'postgresUrl')
  let clear: () => Promise<void> = async () => undefined

  beforeAll(async () => {
    const redis = storeName === 'redis' ? testRedisClient() : undefined
    const pool = storeName === 'postgres' ? testPostgresPool() : undefined
    clear = async () => {
      await redis?.flushall()
      await pool?.query("DELETE FROM idemkit_records WHERE key LIKE 'lim:%'")
    }
    await clear()
    const store = pool
      ? postgresStore({ pool, keyPrefix: 'lim', sweepIntervalMs: 0, onEvent: () => undefined })
      : redisStore({ redis: redis as Redis, keyPrefix: 'lim', onEvent: () => undefined })
    // Records that outlive the test on a loaded machine (each command is a process of seconds).
    const times = { leaseMs: 600_000, replayWindowMs: 600_000, failureRetentionMs: 600_000 }
    for (let i = 0; i < 30; i++) {
      const key = storeKey('lim', 1, operationCode('POST /orders'), randomBytes(32).toString('hex'))
      await store.claim(claimRequest(store, { key, operation: 'POST /orders', ...times }))
    }
    await store.close()
    const close = clear
    clear = async () => {
      await close()
      redis?.disconnect()
      await pool?.end()
    }
  })

  afterAll(async () => {
    await clear()
  })

  it('says it stopped there and how to see more; a list that reached the end says so', async () => {
    const store = url()
    const stopped = await cli(['list', '--store', store, '--key-prefix', 'lim', '--limit', '10'], ENV)
    expect(stopped.code).toBe(0)
    expect(stopped.stdout.trim().split('\n')).toHaveLength(11)
    expect(stopped.stdout).toMatch(/10 shown, the --limit: the scan stopped after 10 records, before the end/)
    expect(stopped.stdout).toContain('Pass a larger --limit')
    const json = JSON.parse(
      (await cli(['list', '--store', store, '--key-prefix', 'lim', '--limit', '10', '--json'], ENV)).stdout,
    )
    expect(json).toMatchObject({ complete: false, scanned: 10 })
    expect(json.records).toHaveLength(10)
    const all = await cli(['list', '--store', store, '--key-prefix', 'lim', '--limit', '100'], ENV)
    expect(all.stdout).toMatch(/^30 of 30 records scanned$/m)
  }, 90_000)
})

describe('the scope and the store from where they are safe', () => {
  let app: FastifyInstance
  let redis: Redis
  const principal = `p-${randomUUID()}`
  const key = randomUUID()
  let dir: string
  let letGo: () => void = () => undefined
  const holder = { promise: new Promise<void>((resolve) => (letGo = resolve)) }

  beforeAll(async () => {
    redis = testRedisClient()
    await redis.ping()
    const store = redisStore({ redis, onEvent: () => undefined })
    app = Fastify()
    await app.register(fastifyIdempotency, {
      store,
      secrets: { current: 1, keys: { 1: SECRET } },
      principal: (request) => request.headers.authorization,
    })
    app.post('/orders', { config: { idempotency: true } }, async (_request, reply) => {
      // Held until the test lets it go: the record stays EXECUTING however slow the commands are.
      await holder.promise
      return reply.code(201).send({ ok: true })
    })
    dir = mkdtempSync(join(tmpdir(), 'idemkit-cli-24-'))
  })

  afterAll(async () => {
    letGo()
    await app.close()
    redis.disconnect()
    rmSync(dir, { recursive: true, force: true })
  })

  it('reads --store from IDEMKIT_STORE and the key and principal from a file or stdin; names flags as typed', async () => {
    const running = app.inject({
      method: 'POST',
      url: '/orders',
      headers: { authorization: principal, 'idempotency-key': key },
      payload: { item: 'book' },
    })
    await new Promise((resolve) => setTimeout(resolve, 300))
    const keyFile = join(dir, 'key')
    writeFileSync(keyFile, `${key}\n`)
    const env = { ...ENV, IDEMKIT_STORE: inject('redisUrl') }
    const fromFile = await cliWithInput(
      ['inspect', '--key-file', keyFile, '--principal-file', '-', '--operation', 'POST /orders'],
      env,
      `${principal}\n`,
    )
    expect(fromFile.code).toBe(0)
    expect(fromFile.stdout).toMatch(/^ {2}state {5}EXECUTING$/m)
    expect(fromFile.stderr).toBe('')

    // The refusals name the flags as they are typed.
    const scope = ['--key-file', keyFile, '--principal', principal, '--operation', 'POST /orders']
    const refused = await cli(['resolve', '--as', 'retryable', ...scope], env)
    expect(refused.code).toBe(4)
    expect(refused.stderr).toContain('pass --force with a --reason')
    expect(refused.stderr).not.toMatch(/pass force|`force`/)
    const noReason = await cli(['resolve', '--as', 'retryable', '--force', ...scope], env)
    expect(noReason.code).toBe(2)
    expect(noReason.stderr).toMatch(/^idemkit: --reason must be given with --force/m)
    const both = await cli(['inspect', '--key', key, ...scope], env)
    expect(both.code).toBe(2)
    expect(both.stderr).toContain('pass --key or --key-file, not both')
    letGo()
    expect((await running).statusCode).toBe(201)
  }, 90_000)

  it('warns when a password is on the command line, not when it comes from IDEMKIT_STORE', async () => {
    const withPassword = inject('postgresUrl').replace('postgres://postgres@', 'postgres://postgres:hunter2@')
    const args = ['inspect', '--principal', principal, '--key', 'never-used', '--operation', 'POST /orders']
    const onArgv = await cli([...args, '--store', withPassword], ENV)
    expect(onArgv.stderr).toContain('warning: the --store URL carries a password')
    expect(onArgv.stderr).not.toContain('hunter2')
    const fromEnv = await cli(args, { ...ENV, IDEMKIT_STORE: withPassword })
    expect(fromEnv.stderr).not.toContain('warning')
    expect(fromEnv.code).toBe(onArgv.code)
  }, 90_000)
})
