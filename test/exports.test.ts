/**
 * The public surface of each entry point, and the published tarball: a missing .lua file in the
 * package would only show up in production, so the tarball is checked here, and so is every
 * entry through both `import` and `require` (one copy of the module state behind both).
 */
import { execFileSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { describe, expect, inject, it } from 'vitest'
import packageJson from '../package.json' with { type: 'json' }
import * as expressEntry from '../plugins/express/index.js'
import * as main from '../plugins/fastify/index.js'
import * as fetchEntry from '../plugins/fetch/index.js'
import * as honoEntry from '../plugins/hono/index.js'
import * as koaEntry from '../plugins/koa/index.js'
import * as nestEntry from '../plugins/nestjs/index.js'
import * as bullmqEntry from '../src/bullmq/index.js'
import * as clientEntry from '../src/client/index.js'
import * as core from '../src/index.js'
import * as drizzleEntry from '../src/orm/drizzle.js'
import * as knexEntry from '../src/orm/knex.js'
import * as kyselyEntry from '../src/orm/kysely.js'
import * as prismaEntry from '../src/orm/prisma.js'
import * as typeormEntry from '../src/orm/typeorm.js'
import * as postgresEntry from '../src/stores/postgres/index.js'
import * as testingEntry from '../src/testing/index.js'

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

  it('exports the Web-standard wrapper from idemkit/fetch as default and by name, with withIdempotency, idempotencyOf and the same stores and errors', () => {
    expect(fetchEntry.default).toBe(fetchEntry.idempotency)
    expect(fetchEntry.fetchIdempotency).toBe(fetchEntry.idempotency)
    expect(fetchEntry.memoryStore).toBe(main.memoryStore)
    expect(fetchEntry.IdempotencyError).toBe(main.IdempotencyError)
    expect(Object.keys(fetchEntry).sort()).toEqual(
      [...ADAPTER_SHARED, 'fetchIdempotency', 'idempotencyOf', 'withIdempotency'].sort(),
    )
  })

  it('exports the Koa middleware from idemkit/koa as default and by name, with the same stores and errors', () => {
    expect(koaEntry.default).toBe(koaEntry.idempotency)
    expect(koaEntry.koaIdempotency).toBe(koaEntry.idempotency)
    expect(koaEntry.memoryStore).toBe(main.memoryStore)
    expect(koaEntry.IdempotencyError).toBe(main.IdempotencyError)
    expect(Object.keys(koaEntry).sort()).toEqual([...ADAPTER_SHARED, 'koaIdempotency'].sort())
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

  it('exports the BullMQ processor from idemkit/bullmq', () => {
    expect(Object.keys(bullmqEntry).sort()).toEqual(['idempotentProcessor'])
  })

  it('exports the ORM adapters, each from its own entry', () => {
    expect(Object.keys(drizzleEntry).sort()).toEqual(['drizzleTransactions'])
    expect(Object.keys(kyselyEntry).sort()).toEqual(['kyselyTransactions'])
    expect(Object.keys(knexEntry).sort()).toEqual(['knexTransactions'])
    expect(Object.keys(typeormEntry).sort()).toEqual(['typeormTransactions'])
    expect(Object.keys(prismaEntry).sort()).toEqual(['PRISMA_NO_TIMEOUT_MS', 'prismaTransactions'])
  })

  it('exports the store contract suite from idemkit/testing', () => {
    expect(Object.keys(testingEntry).sort()).toEqual(['claimRequest', 'describeStoreContract'])
  })

  it('exports idempotentFetch from idemkit/client, with the error class of every entry and no other module than the errors', () => {
    expect(Object.keys(clientEntry).sort()).toEqual(['ErrorCode', 'IdempotencyError', 'idempotentFetch'])
    expect(clientEntry.IdempotencyError).toBe(core.IdempotencyError)
    expect(typeof clientEntry.idempotentFetch.with).toBe('function')
    // No runtime dependency, no store, no framework: the client's files import each other and the errors.
    const imported = readdirSync('src/client').flatMap((file) =>
      [...readFileSync(`src/client/${file}`, 'utf8').matchAll(/^(?:import|export) .* from '([^']+)'/gm)].map(
        (match) => match[1],
      ),
    )
    expect(new Set(imported)).toEqual(new Set(['./idempotent-fetch.js', './retry-rules.js', '../core/errors.js']))
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
        'IdempotencyInProgressError',
        'IdempotencyKeyReusedError',
        'IdempotencyRecoveryRequiredError',
        'InspectReply',
        'LeaseLostError',
        'OUTCOME_CHANNEL',
        'RecordState',
        'RecoveryReason',
        'ReplayCache',
        'SHARED_PRINCIPAL',
        'START_CHANNEL',
        'STORE_CHANNEL',
        'StoreIndeterminateError',
        'StoreProtocolError',
        'StoreUnavailableError',
        'TransitionReply',
        'UnrecordedReason',
        'begin',
        'redisFault',
        'defaultClassify',
        'derivedKey',
        'execute',
        'fingerprint',
        'idempotent',
        'idempotentBatch',
        'isTransactional',
        'jsonCodec',
        'keepsSteps',
        'makeIdempotent',
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
    if (!existsSync('dist/node10/index.d.ts') || !existsSync('dist/src/stores/postgres/sql/functions/1-rules.sql'))
      execFileSync('npm', ['run', 'build'], { stdio: 'pipe' })
  }

  /** The entries of package.json's `exports` (the subpaths with an import and a require target). */
  const ENTRIES = Object.entries(packageJson.exports).flatMap(([subpath, target]) =>
    typeof target === 'object' ? [{ subpath, specifier: `idemkit${subpath.slice(1)}`, ...target }] : [],
  )

  it('has idemkit/fastify as the Fastify entry beside the root, and every entry with both conditions', () => {
    expect(packageJson.exports['.']).toEqual(packageJson.exports['./fastify'])
    expect(ENTRIES.map((entry) => entry.subpath)).toEqual(
      expect.arrayContaining([
        '.',
        './fastify',
        './express',
        './hono',
        './nestjs',
        './fetch',
        './koa',
        './core',
        './postgres',
        './otel',
        './admin',
        './testing',
        './client',
        './bullmq',
        './drizzle',
        './kysely',
        './knex',
        './typeorm',
        './prisma',
      ]),
    )
    for (const entry of ENTRIES) {
      expect(Object.keys(entry).sort()).toEqual(['import', 'require', 'specifier', 'subpath'])
      expect(entry.require).toBe(entry.import.replace(/\.js$/, '.cjs'))
    }
    expect(packageJson.sideEffects).toBe(false)
  })

  it('contains every Lua script, the PostgreSQL migrations, the CLI and both module formats of each entry, and no tests or maps', () => {
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
    for (const entry of ENTRIES) {
      const target = entry.import.slice(2)
      expect(files).toContain(target)
      expect(files).toContain(target.replace(/\.js$/, '.d.ts'))
      expect(files).toContain(target.replace(/\.js$/, '.cjs'))
      expect(files).toContain(target.replace(/\.js$/, '.d.cts'))
      const node10 = entry.subpath === '.' ? 'index' : entry.subpath.slice(2)
      expect(files).toContain(`dist/node10/${node10}.d.ts`)
    }
    // Every function as it runs now and every numbered migration file, one per schema version, for
    // teams that apply them with their own migration tool (docs/postgresql.md).
    const migrations = readdirSync('src/stores/postgres/sql').filter((name) => /^\d{3}-.*\.sql$/.test(name))
    expect(migrations.map((name) => Number(name.slice(0, 3)))).toEqual(
      Array.from({ length: postgresEntry.POSTGRES_SCHEMA_VERSION }, (_, i) => i + 1),
    )
    for (const name of migrations) expect(files).toContain(`dist/src/stores/postgres/sql/${name}`)
    // The functions' three files, which every migration applies after the numbered ones, in name order.
    const functions = readdirSync('src/stores/postgres/sql/functions').sort()
    expect(functions).toEqual(['1-rules.sql', '2-operations.sql', '3-earlier-versions.sql'])
    for (const name of functions) expect(files).toContain(`dist/src/stores/postgres/sql/functions/${name}`)
    expect(files).toContain('dist/src/admin/cli.js')
    expect(files).toContain('package.json')
    expect(files.some((file) => file.startsWith('test/') || file.startsWith('src/'))).toBe(false)
    expect(
      files.some(
        (file) =>
          file.endsWith('.map') || (file.endsWith('.ts') && !file.endsWith('.d.ts') && !file.endsWith('.d.cts')),
      ),
    ).toBe(false)
    // No source map is shipped, so no compiled file may point to one.
    for (const file of files.filter((name) => /\.(c?js|d\.c?ts)$/.test(name))) {
      expect(readFileSync(file, 'utf8'), file).not.toContain('sourceMappingURL')
    }
  }, 120_000)

  it('loads every entry with require() and with import, as one copy of the module', () => {
    build()
    // Run from the package's own directory: `idemkit/...` resolves through its exports.
    const program = `
      const specifiers = ${JSON.stringify(ENTRIES.map((entry) => entry.specifier))}
      ;(async () => {
        const out = {}
        for (const specifier of specifiers) {
          const required = require(specifier)
          const imported = await import(specifier)
          const names = Object.keys(imported).sort()
          // fastify-plugin names the plugin function after itself (fn.idemkit = fn): not an export.
          const own = Object.keys(required).filter((name) => !(name in imported) && required[name] === required)
          out[specifier] = {
            names: Object.keys(required).filter((name) => !own.includes(name)).sort().join() === names.join() ? names.length : 'different',
            same: names.every((name) => required[name] === imported[name]),
            callable: typeof imported.default === 'function' ? required === imported.default : 'no default function',
          }
        }
        const core = require('idemkit/core')
        const error = new (await import('idemkit/express')).IdempotencyError('ERR_IDEM_INVALID_OPTION', 'x')
        out.instanceof = error instanceof core.IdempotencyError
        console.log(JSON.stringify(out))
      })()
    `
    const output = JSON.parse(execFileSync(process.execPath, ['-e', program], { encoding: 'utf8' }).trim())

    expect(output.instanceof).toBe(true)
    for (const entry of ENTRIES) {
      expect(output[entry.specifier].same, entry.specifier).toBe(true)
      expect(output[entry.specifier].names, entry.specifier).toBeGreaterThan(0)
    }
    // require('idemkit/express')(options), as CommonJS middleware is called.
    for (const specifier of [
      'idemkit',
      'idemkit/fastify',
      'idemkit/express',
      'idemkit/hono',
      'idemkit/fetch',
      'idemkit/koa',
    ]) {
      expect(output[specifier].callable, specifier).toBe(true)
    }
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
