/**
 * The public surface of each entry point, and the published tarball (STYLE 3): a missing .lua
 * file in the package would only show up in production, so the tarball is checked here.
 */
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { describe, expect, inject, it } from 'vitest'
import * as expressEntry from '../plugins/express/index.js'
import * as main from '../plugins/fastify/index.js'
import * as honoEntry from '../plugins/hono/index.js'
import * as nestEntry from '../plugins/nestjs/index.js'
import * as core from '../src/index.js'
import * as postgresEntry from '../src/stores/postgres/index.js'

/** What both framework entries export besides their own adapter's name. */
const ADAPTER_SHARED = [
  'ErrorCode',
  'IdempotencyError',
  'ProblemCode',
  'StoreIndeterminateError',
  'StoreProtocolError',
  'StoreUnavailableError',
  'default',
  'idempotency',
  'memoryStore',
  'postgresStore',
  'problemType',
  'redisStore',
]

describe('exports', () => {
  it('exports the Fastify plugin as default and by name, with the stores and errors', () => {
    expect(main.default).toBe(main.fastifyIdempotency)
    expect(main.idempotency).toBe(main.fastifyIdempotency)
    expect(Object.keys(main).sort()).toEqual([...ADAPTER_SHARED, 'fastifyIdempotency'].sort())
  })

  it('exports the Express middleware as default and by name, with the same stores and errors', () => {
    expect(expressEntry.default).toBe(expressEntry.idempotency)
    expect(expressEntry.expressIdempotency).toBe(expressEntry.idempotency)
    expect(expressEntry.memoryStore).toBe(main.memoryStore)
    expect(expressEntry.IdempotencyError).toBe(main.IdempotencyError)
    expect(Object.keys(expressEntry).sort()).toEqual([...ADAPTER_SHARED, 'expressIdempotency'].sort())
  })

  it('exports the Hono middleware from idemkit/hono as default and by name, with the same stores and errors', () => {
    expect(honoEntry.default).toBe(honoEntry.idempotency)
    expect(honoEntry.honoIdempotency).toBe(honoEntry.idempotency)
    expect(honoEntry.memoryStore).toBe(main.memoryStore)
    expect(honoEntry.IdempotencyError).toBe(main.IdempotencyError)
    expect(Object.keys(honoEntry).sort()).toEqual([...ADAPTER_SHARED, 'honoIdempotency'].sort())
  })

  it('exports the Nest module, decorators and interceptor from idemkit/nestjs, with the same stores and errors', () => {
    expect(nestEntry.memoryStore).toBe(main.memoryStore)
    expect(nestEntry.IdempotencyError).toBe(main.IdempotencyError)
    const own = [
      'IDEMPOTENCY_OPTIONS',
      'IdempotencyInfo',
      'IdempotencyInterceptor',
      'IdempotencyModule',
      'IdempotencyRegistry',
      'Idempotent',
    ]
    const shared = ADAPTER_SHARED.filter((name) => name !== 'default' && name !== 'idempotency')
    expect(Object.keys(nestEntry).sort()).toEqual([...shared, ...own].sort())
  })

  it('exports the PostgreSQL store from idemkit/postgres, the same function as the other entries', () => {
    expect(Object.keys(postgresEntry).sort()).toEqual(
      [
        'POSTGRES_SCHEMA_VERSION',
        'PostgresStore',
        'migrationFiles',
        'migrationSql',
        'postgresFault',
        'postgresStore',
      ].sort(),
    )
    expect(main.postgresStore).toBe(postgresEntry.postgresStore)
    expect(expressEntry.postgresStore).toBe(postgresEntry.postgresStore)
    expect(core.postgresStore).toBe(postgresEntry.postgresStore)
  })

  it('exports the core entry by an explicit list', () => {
    expect(Object.keys(core).sort()).toEqual(
      [
        'ClaimReply',
        'Classification',
        'DEFAULT_POLICY',
        'EVENT_CHANNEL',
        'ErrorCode',
        'Executor',
        'ExpiredExecution',
        'FINGERPRINT_VERSION',
        'FailureKind',
        'IdempotencyError',
        'InspectReply',
        'LeaseLostError',
        'OUTCOME_CHANNEL',
        'RecordState',
        'RecoveryReason',
        'STORE_CHANNEL',
        'StoreIndeterminateError',
        'StoreProtocolError',
        'StoreUnavailableError',
        'TransitionReply',
        'UnrecordedReason',
        'begin',
        'redisFault',
        'defaultClassify',
        'execute',
        'fingerprint',
        'isTransactional',
        'jsonCodec',
        'memoryStore',
        'newOwnerToken',
        'operationCode',
        'parseSecrets',
        'postgresFault',
        'postgresStore',
        'redisStore',
        'resolvePolicy',
        'scopeDigest',
        'storeKey',
      ].sort(),
    )
  })
})

describe('published package', () => {
  function build(): void {
    if (!existsSync('dist/src/stores/postgres/sql/002-functions.sql'))
      execFileSync('npm', ['run', 'build'], { stdio: 'pipe' })
  }

  it('contains every Lua script, the PostgreSQL migrations and the compiled entries', () => {
    build()

    const packed = JSON.parse(
      execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { encoding: 'utf8' }),
    )
    const files: string[] = packed[0].files.map((file: { path: string }) => file.path)

    for (const script of ['claim', 'inspect', 'start', 'complete', 'mark-failed', 'release', 'renew', 'replace']) {
      expect(files).toContain(`dist/src/stores/redis/scripts/${script}.lua`)
    }
    for (const lib of ['args', 'live', 'now', 'record', 'transition']) {
      expect(files).toContain(`dist/src/stores/redis/scripts/lib/${lib}.lua`)
    }
    expect(files).toContain('dist/plugins/fastify/index.js')
    expect(files).toContain('dist/plugins/fastify/index.d.ts')
    expect(files).toContain('dist/plugins/express/index.js')
    expect(files).toContain('dist/plugins/express/index.d.ts')
    expect(files).toContain('dist/plugins/hono/index.js')
    expect(files).toContain('dist/plugins/hono/index.d.ts')
    expect(files).toContain('dist/plugins/nestjs/index.js')
    expect(files).toContain('dist/plugins/nestjs/index.d.ts')
    expect(files).toContain('dist/src/index.js')
    expect(files).toContain('dist/src/stores/postgres/index.js')
    expect(files).toContain('dist/src/stores/postgres/sql/001-records.sql')
    expect(files).toContain('dist/src/stores/postgres/sql/002-functions.sql')
    expect(files).toContain('dist/src/otel/index.js')
    expect(files).toContain('dist/src/admin/index.js')
    expect(files).toContain('dist/src/admin/cli.js')
    expect(files).toContain('dist/src/otel/index.d.ts')
    expect(files.some((file) => file.startsWith('test/') || file.startsWith('src/'))).toBe(false)
  }, 120_000)

  it('runs a claim and a completion from the built package on a real Redis', () => {
    build()
    const program = `
      import { Redis } from 'ioredis'
      import { execute, jsonCodec, redisStore, resolvePolicy } from './dist/src/index.js'
      const redis = new Redis(process.argv[1])
      await new Promise((resolve) => redis.once('ready', resolve))
      const store = redisStore({ redis, keyPrefix: 'packaged' })
      const request = { store, key: 'packaged:idem:1:d1:op:' + 'a'.repeat(64), operation: 'op', fingerprint: 'f1:x',
        codec: jsonCodec(), policy: resolvePolicy({}), action: () => ({ ok: true }) }
      const first = await execute(request)
      const second = await execute(request)
      console.log(JSON.stringify([first.kind, second.kind]))
      await redis.flushall()
      redis.disconnect()
    `

    const output = execFileSync(process.execPath, ['--input-type=module', '-e', program, inject('redisUrl')], {
      encoding: 'utf8',
    })

    expect(JSON.parse(output.trim())).toEqual(['EXECUTED', 'REPLAYED'])
  }, 120_000)

  it('migrates, claims and completes from the built idemkit/postgres on a real PostgreSQL', () => {
    build()
    const program = `
      import pg from 'pg'
      import { execute, jsonCodec, resolvePolicy } from './dist/src/index.js'
      import { postgresStore } from './dist/src/stores/postgres/index.js'
      const pool = new pg.Pool({ connectionString: process.argv[1] })
      const store = postgresStore({ pool, keyPrefix: 'packaged', table: 'idemkit_packaged' })
      await store.migrate()
      const request = { store, key: 'packaged:idem:1:d1:op:' + 'b'.repeat(64), operation: 'op', fingerprint: 'f1:x',
        codec: jsonCodec(), policy: resolvePolicy({}), action: () => ({ ok: true }) }
      const first = await execute(request)
      const second = await execute(request)
      console.log(JSON.stringify([first.kind, second.kind]))
      await pool.query('DROP TABLE idemkit_packaged')
      await store.close()
      await pool.end()
    `

    const output = execFileSync(process.execPath, ['--input-type=module', '-e', program, inject('postgresUrl')], {
      encoding: 'utf8',
    })

    expect(JSON.parse(output.trim())).toEqual(['EXECUTED', 'REPLAYED'])
  }, 120_000)
})
