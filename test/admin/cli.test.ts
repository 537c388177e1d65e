/**
 * `idemkit inspect` as an operator runs it: a child process against the suite's redis-server
 * and PostgreSQL, finding records made through HTTP (a 201, a 5xx that left the key ABANDONED,
 * a key never used), under a rotated secret too; usage errors exit 2 without a stack trace; an
 * unreachable store exits 3. `inspectScope()` (the same, programmatic) on the memory store.
 */
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify, { type FastifyInstance } from 'fastify'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import fastifyIdempotency from '../../plugins/fastify/index.js'
import { inspectScope } from '../../src/admin/index.js'
import { parseSecrets } from '../../src/core/scope.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { postgresStore } from '../../src/stores/postgres/index.js'
import { redisStore } from '../../src/stores/redis/index.js'
import { cli } from '../helpers/cli.js'
import { testPostgresPool, testRedisClient } from '../helpers/stores.js'

const SECRET_1 = 'a'.repeat(32)
const SECRET_2 = 'b'.repeat(32)

/** The handler's failure: its class is kept with the record, its message (the request's data) is not. */
class OrderServiceDown extends Error {}

/** Handler runs per Idempotency-Key. */
const executions = new Map<string, number>()
/** Handlers held open (`x-hold: release`) until the test calls the key's function. */
const held = new Map<string, () => void>()

/**
 * An app whose POST /orders answers 201, or 500 with `x-fail` (leaving the key ABANDONED), after
 * `x-hold-ms`.
 */
async function app(store: IdempotencyStore, secrets: { current: number; keys: Record<number, string> }) {
  const instance = Fastify()
  await instance.register(fastifyIdempotency, { store, secrets, principal: (request) => request.headers.authorization })
  instance.post('/orders', { config: { idempotency: true } }, async (request, reply) => {
    const key = String(request.headers['idempotency-key'])
    executions.set(key, (executions.get(key) ?? 0) + 1)
    await new Promise<void>((resolve) =>
      request.headers['x-hold'] === 'release'
        ? held.set(key, resolve)
        : setTimeout(resolve, Number(request.headers['x-hold-ms'] ?? 0)),
    )
    if (request.headers['x-fail']) {
      throw new OrderServiceDown(`no stock for ${(request.body as { item: string }).item}`)
    }
    return reply.code(201).send({ ok: true })
  })
  await instance.ready()
  return instance
}

/** `hold`: milliseconds, or `'release'` to run until the test releases the key (`held`). */
const order = (instance: FastifyInstance, user: string, key: string, fail = false, hold: number | 'release' = 0) =>
  instance.inject({
    method: 'POST',
    url: '/orders',
    headers: {
      authorization: user,
      'idempotency-key': key,
      ...(hold === 'release' ? { 'x-hold': 'release' } : { 'x-hold-ms': String(hold) }),
      ...(fail ? { 'x-fail': '1' } : {}),
    },
    payload: { item: 'book' },
  })

describe.each([
  ['redis', () => inject('redisUrl')],
  ['postgres', () => inject('postgresUrl')],
] as const)('idemkit inspect on %s', { timeout: 120_000 }, (name, url) => {
  let instance: FastifyInstance
  let close: () => Promise<void>
  let current: IdempotencyStore
  const user = `cli-${randomUUID().slice(0, 8)}`
  const done = randomUUID()
  const failed = randomUUID()

  beforeAll(async () => {
    let store: IdempotencyStore
    if (name === 'redis') {
      const redis = testRedisClient()
      // Connected first: the store answers 503 at once while its client is not (failFast).
      await redis.ping()
      store = redisStore({ redis })
      close = async () => {
        await store.close()
        redis.disconnect()
      }
    } else {
      const pool = testPostgresPool()
      store = postgresStore({ pool, sweepIntervalMs: 0 })
      close = async () => {
        await store.close()
        await pool.end()
      }
    }
    current = store
    instance = await app(store, { current: 1, keys: { 1: SECRET_1 } })
    expect((await order(instance, user, done)).statusCode).toBe(201)
    expect((await order(instance, user, failed, true)).statusCode).toBe(500)
  })

  afterAll(async () => {
    await instance.close()
    await close()
  })

  const args = (key: string, ...extra: string[]) => [
    'inspect',
    '--store',
    url(),
    '--principal',
    user,
    '--key',
    key,
    '--operation',
    'POST /orders',
    ...extra,
  ]

  it('shows a completed record with its stored status, and an abandoned one', async () => {
    const completed = await cli(args(done), { IDEMPOTENCY_SECRET: SECRET_1 })
    expect(completed.code).toBe(0)
    expect(completed.stdout).toMatch(/^POST \/orders: scope digest [0-9a-f]{12} \(secret version 1, current\)$/m)
    expect(completed.stdout).toMatch(/^ {2}state {5}COMPLETED$/m)
    expect(completed.stdout).toMatch(/^ {2}response {2}201, \d+ bytes$/m)
    expect(completed.stdout).toMatch(/^ {2}replays {3}for 23 h 59 min$/m)

    const abandoned = await cli(args(failed, '--json'), { IDEMPOTENCY_SECRET: SECRET_1 })
    expect(abandoned.code).toBe(0)
    const inspection = JSON.parse(abandoned.stdout)
    expect(inspection.versions).toHaveLength(1)
    expect(inspection.versions[0].record).toMatchObject({
      state: 'ABANDONED',
      attempt: 1,
      operation: 'POST /orders',
      expired: false,
    })
    expect(inspection.versions[0].record.expiresInMs).toBeGreaterThan(23 * 3_600_000)
    expect(inspection.versions[0].record.cause).toEqual({ class: 'OrderServiceDown, HTTP 500' })

    const text = await cli(args(failed), { IDEMPOTENCY_SECRET: SECRET_1 })
    expect(text.stdout).toMatch(
      /^ {2}cause {5}OrderServiceDown, HTTP 500; a handler's message is not kept \(it may carry the request's data\)$/m,
    )
    expect(text.stdout).not.toContain('no stock')
    expect(text.stdout).not.toContain('book')
  })

  it('reads the same in process (inspectScope), with the store’s clock', async () => {
    const inspection = await inspectScope({
      store: current,
      secrets: parseSecrets({ current: 1, keys: { 1: SECRET_1 } }),
      principal: user,
      key: failed,
      operation: 'POST /orders',
    })
    expect(inspection.versions[0]?.record).toMatchObject({
      state: 'ABANDONED',
      attempt: 1,
      rev: 2,
      cause: { class: 'OrderServiceDown, HTTP 500' },
    })
    expect(Math.abs(inspection.now - Date.now())).toBeLessThan(5_000)
    expect(
      (
        await inspectScope({
          store: current,
          secrets: parseSecrets({ current: 1, keys: { 1: SECRET_1 } }),
          principal: user,
          key: 'never',
          operation: 'POST /orders',
        })
      ).versions[0]?.record,
    ).toBeUndefined()
  })

  it('resolve --as retryable: the next retry of an ABANDONED key runs once', async () => {
    const key = randomUUID()
    expect((await order(instance, user, key, true)).statusCode).toBe(500)
    expect((await order(instance, user, key)).json()).toMatchObject({ code: 'IDEMPOTENCY_RECOVERY_REQUIRED' })
    const resolved = await cli(['resolve', '--as', 'retryable', ...args(key).slice(1), '--actor', 'oncall'], {
      IDEMPOTENCY_SECRET: SECRET_1,
    })
    expect(resolved.code).toBe(0)
    expect(resolved.stdout).toMatch(/ABANDONED -> FAILED_RETRYABLE$/m)
    const audit = JSON.parse(resolved.stderr.trim())
    expect(audit).toMatchObject({ type: 'admin-resolve', actor: 'oncall', from: 'ABANDONED', to: 'FAILED_RETRYABLE' })
    expect(resolved.stderr).not.toContain(key)
    expect(resolved.stderr).not.toContain(user)
    expect((await order(instance, user, key)).statusCode).toBe(201)
    expect((await order(instance, user, key)).headers['idempotent-replayed']).toBe('true')
    expect(executions.get(key)).toBe(2)
  })

  it('resolve --as completed: the next retry replays the operator’s answer; nothing runs', async () => {
    const key = randomUUID()
    expect((await order(instance, user, key, true)).statusCode).toBe(500)
    const dir = mkdtempSync(join(tmpdir(), 'idemkit-cli-'))
    try {
      const file = join(dir, 'answer.json')
      writeFileSync(file, JSON.stringify({ id: 'ord_42', resolvedBy: 'support' }))
      const resolved = await cli(
        [
          'resolve',
          '--as',
          'completed',
          '--status',
          '200',
          '--body-file',
          file,
          ...args(key).slice(1),
          '--actor',
          'oncall',
          '--reason',
          'the order was placed by phone',
        ],
        { IDEMPOTENCY_SECRET: SECRET_1 },
      )
      expect(resolved.code).toBe(0)
      const replay = await order(instance, user, key)
      expect(replay.statusCode).toBe(200)
      expect(replay.headers['idempotent-replayed']).toBe('true')
      expect(replay.headers['content-type']).toBe('application/json')
      expect(replay.json()).toEqual({ id: 'ord_42', resolvedBy: 'support' })
      expect(executions.get(key)).toBe(1)
      // The record itself keeps who resolved it, when and why, and inspect shows it.
      const shown = await cli(args(key), { IDEMPOTENCY_SECRET: SECRET_1 })
      expect(shown.code).toBe(0)
      expect(shown.stdout).toMatch(/^ {2}state {5}COMPLETED$/m)
      expect(shown.stdout).toMatch(
        /^ {2}resolved {2}by oncall at \d{4}-\d\d-\d\dT[\d:.]+Z, from ABANDONED, attempt 1 fenced off: the order was placed by phone$/m,
      )
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('refuses a running execution and a completed record without --force (exit 4)', async () => {
    const key = randomUUID()
    // Running until released: a CLI process that takes seconds to start on a loaded machine
    // still finds the execution running.
    const running = order(instance, user, key, false, 'release')
    while (!held.has(key)) await new Promise((resolve) => setTimeout(resolve, 20))
    const refused = await cli(['resolve', '--as', 'retryable', ...args(key).slice(1)], {
      IDEMPOTENCY_SECRET: SECRET_1,
      IDEMKIT_ACTOR: 'oncall',
    })
    expect(refused.code).toBe(4)
    expect(refused.stderr).toMatch(/^idemkit: refused: The record is EXECUTING and its lease runs/m)
    held.get(key)?.()
    expect((await running).statusCode).toBe(201)

    const completed = await cli(['resolve', '--delete', ...args(key).slice(1)], {
      IDEMPOTENCY_SECRET: SECRET_1,
      IDEMKIT_ACTOR: 'oncall',
    })
    expect(completed.code).toBe(4)
    expect(completed.stderr).toContain('The record is COMPLETED')
    const forced = await cli(['resolve', '--delete', '--force', '--reason', 'a test', ...args(key).slice(1)], {
      IDEMPOTENCY_SECRET: SECRET_1,
      USER: 'oncall',
    })
    expect(forced.code).toBe(0)
    expect(JSON.parse(forced.stderr.trim())).toMatchObject({ from: 'COMPLETED', to: 'deleted', forced: true })
    // Deleted: the key is new again.
    const again = await order(instance, user, key)
    expect(again.statusCode).toBe(201)
    expect(again.headers['idempotent-replayed']).toBeUndefined()
    expect(executions.get(key)).toBe(2)
  })

  it('resolve refuses to run without someone to record: --actor, IDEMKIT_ACTOR or the login name', async () => {
    const key = randomUUID()
    expect((await order(instance, user, key, true)).statusCode).toBe(500)
    const resolve = ['resolve', '--as', 'retryable', ...args(key).slice(1)]
    const nobody = await cli(resolve, { IDEMPOTENCY_SECRET: SECRET_1 })
    expect(nobody.code).toBe(2)
    expect(nobody.stderr).toContain('pass --actor <name>, or set IDEMKIT_ACTOR')
    expect(nobody.stderr).not.toContain('Usage:')
    const fromEnv = await cli(resolve, { IDEMPOTENCY_SECRET: SECRET_1, IDEMKIT_ACTOR: 'pager', USER: 'shell' })
    expect(fromEnv.code).toBe(0)
    expect(JSON.parse(fromEnv.stderr.trim())).toMatchObject({ actor: 'pager' })
    expect(fromEnv.stderr).not.toContain('unknown')
  })

  it('says the operation lacks its method when --operation is a bare path', async () => {
    const run = await cli(['inspect', ...args(done).slice(1, -1), '/orders'], { IDEMPOTENCY_SECRET: SECRET_1 })
    expect(run.code).toBe(1)
    expect(run.stdout).toContain('no record')
    expect(run.stderr).toContain(`e.g. --operation 'POST /orders'`)
    const named = await cli(args(randomUUID()), { IDEMPOTENCY_SECRET: SECRET_1 })
    expect(named.code).toBe(1)
    expect(named.stderr).not.toContain('has no method')
  })

  it('inspect and resolve take the digest list prints, with no principal, key or secret', async () => {
    const key = randomUUID()
    expect((await order(instance, user, key, true)).statusCode).toBe(500)
    const inspected = JSON.parse((await cli(args(key, '--json'), { IDEMPOTENCY_SECRET: SECRET_1 })).stdout)
    const digest = inspected.versions[0].digest as string
    expect(digest).toMatch(/^[0-9a-f]{12}$/)
    const listed = await cli(['list', '--store', url(), '--state', 'ABANDONED', '--limit', '100000'])
    expect(listed.stdout).toMatch(new RegExp(`^[0-9a-f]{8} ${digest}  ABANDONED `, 'm'))

    const byDigest = await cli(['inspect', '--store', url(), '--digest', digest])
    expect(byDigest.code).toBe(0)
    expect(byDigest.stdout).toContain(`POST /orders: scope digest ${digest} (secret version 1)`)
    expect(byDigest.stdout).toMatch(/^ {2}state {5}ABANDONED$/m)

    const resolved = await cli([
      'resolve',
      '--as',
      'retryable',
      '--store',
      url(),
      '--digest',
      digest,
      '--actor',
      'oncall',
    ])
    expect(resolved.code, resolved.stderr).toBe(0)
    expect(resolved.stdout).toContain(`POST /orders: scope digest ${digest}: ABANDONED -> FAILED_RETRYABLE`)
    executions.delete(key)
    expect((await order(instance, user, key)).statusCode).toBe(201)
    expect(executions.get(key)).toBe(1)

    const none = await cli(['inspect', '--store', url(), '--digest', '0000000000ff'])
    expect(none.code).toBe(1)
    const both = await cli(['inspect', '--store', url(), '--digest', digest, '--key', key])
    expect(both.code).toBe(2)
  })

  it('exits 1 for a key never used, or under another principal, or with another secret', async () => {
    expect((await cli(args(randomUUID()), { IDEMPOTENCY_SECRET: SECRET_1 })).code).toBe(1)
    const other = await cli(
      ['inspect', '--store', url(), '--principal', 'mallory', '--key', done, '--operation', 'POST /orders'],
      {
        IDEMPOTENCY_SECRET: SECRET_1,
      },
    )
    expect(other.code).toBe(1)
    expect(other.stdout).toMatch(/no record$/m)
    expect((await cli(args(done), { IDEMPOTENCY_SECRET: SECRET_2 })).code).toBe(1)
  })

  it('finds the record under an older secret version during a rotation', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idemkit-cli-'))
    try {
      const file = join(dir, 'secrets.json')
      writeFileSync(file, JSON.stringify({ current: 2, keys: { 1: SECRET_1, 2: SECRET_2 } }))
      const run = await cli(args(done, '--secrets-file', file, '--json'))
      expect(run.code).toBe(0)
      const { versions } = JSON.parse(run.stdout)
      expect(
        versions.map((version: { version: number; current: boolean }) => [version.version, version.current]),
      ).toEqual([
        [2, true],
        [1, false],
      ])
      expect(versions[0].record).toBeUndefined()
      expect(versions[1].record.state).toBe('COMPLETED')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe('idemkit usage', { timeout: 120_000 }, () => {
  it('answers bad arguments with the usage and exit 2, never a stack trace', async () => {
    for (const args of [
      [],
      ['delete'],
      ['inspect', '--store', 'redis://127.0.0.1:1'],
      ['inspect', '--secret', 'x'],
      ['inspect', '--store', 'mysql://x', '--principal', 'p', '--key', 'k', '--operation', 'POST /x'],
    ]) {
      const run = await cli(args, { IDEMPOTENCY_SECRET: SECRET_1 })
      expect(run.code, args.join(' ')).toBe(2)
      expect(run.stderr).toContain('Usage: idemkit inspect')
      expect(run.stderr).not.toMatch(/\n\s+at /)
    }
    const noSecret = await cli([
      'inspect',
      '--store',
      'redis://x',
      '--principal',
      'p',
      '--key',
      'k',
      '--operation',
      'POST /x',
    ])
    expect(noSecret.code).toBe(2)
    expect(noSecret.stderr).toContain('set IDEMPOTENCY_SECRET, or pass --secrets-file')
    // The error alone: a missing secret is not a mistyped command.
    expect(noSecret.stderr).not.toContain('Usage:')
    expect(noSecret.stderr.trim().split('\n')).toHaveLength(1)
  })

  it('exits 3 when the store cannot be reached', async () => {
    const run = await cli(
      ['inspect', '--store', 'redis://127.0.0.1:1', '--principal', 'p', '--key', 'k', '--operation', 'POST /x'],
      { IDEMPOTENCY_SECRET: SECRET_1 },
    )
    expect(run.code).toBe(3)
    expect(run.stderr).toMatch(/^idemkit: cannot connect to redis 127\.0\.0\.1:1\/0: connect ECONNREFUSED/)
  })
})

describe('inspectScope() on the memory store', () => {
  it('reads a scope the same way, in the process that holds the records', async () => {
    const store = memoryStore()
    const instance = await app(store, { current: 1, keys: { 1: SECRET_1 } })
    try {
      await order(instance, 'alice', 'k-1', true)
      const inspection = await inspectScope({
        store,
        secrets: parseSecrets({ current: 1, keys: { 1: SECRET_1 } }),
        principal: 'alice',
        key: 'k-1',
        operation: 'POST /orders',
      })
      expect(inspection.versions[0]?.record).toMatchObject({
        state: 'ABANDONED',
        attempt: 1,
        cause: { class: 'OrderServiceDown, HTTP 500' },
      })
    } finally {
      await instance.close()
      await store.close()
    }
  })
})
