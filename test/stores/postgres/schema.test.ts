/**
 * The PostgreSQL store's ways to the current schema end in the same catalog: a new database given
 * every numbered file and the three files of `sql/functions/` by `migrate()`, and a database as
 * each earlier release left it (the releases' own files, functions included, frozen in
 * fixtures/released/) brought up to date by `migrate()`. Functions are compared by their name, arguments, result,
 * body (`prosrc`), settings (`proconfig`) and kind; tables by their columns (type, default,
 * nullability), constraints, storage options and comment (the schema version); indexes by their
 * definition. An edit to a functions' file or a numbered file that the releases' files do not make
 * (or a table change of a release that the numbered files miss) fails here.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import {
  migrationFiles,
  migrationSql,
  POSTGRES_SCHEMA_VERSION,
  type PostgresStore,
  postgresStore,
} from '../../../src/stores/postgres/index.js'
import { sleep } from '../../helpers/sleep.js'
import { testPostgresPool } from '../../helpers/stores.js'
import { RELEASED_VERSIONS, releasedFile, releasedSql } from './fixtures/released/index.js'

const TABLE = 'idemkit_records'

/** One query's rows, the schema's name replaced by `<schema>` wherever it shows. */
async function rows(client: pg.Client, schema: string, text: string): Promise<unknown[]> {
  const { rows } = await client.query(text, [schema])
  return JSON.parse(JSON.stringify(rows).replaceAll(schema, '<schema>')) as unknown[]
}

/** What the catalog holds of one schema: its functions, tables, columns, constraints and indexes. */
async function catalog(client: pg.Client, schema: string) {
  return {
    functions: await rows(
      client,
      schema,
      `SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args, p.proargtypes::regtype[]::text AS argtypes,
         pg_get_function_result(p.oid) AS result, p.proargnames, p.proargmodes, p.prokind, p.provolatile,
         p.proisstrict, p.prosecdef, l.lanname, p.proconfig, p.prosrc
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
       WHERE n.nspname = $1 ORDER BY p.proname, args`,
    ),
    tables: await rows(
      client,
      schema,
      `SELECT c.relname, c.relkind, c.relpersistence, c.reloptions, obj_description(c.oid, 'pg_class') AS comment
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'S') ORDER BY c.relname`,
    ),
    columns: await rows(
      client,
      schema,
      `SELECT table_name, ordinal_position, column_name, data_type, column_default, is_nullable, character_maximum_length,
         numeric_precision, datetime_precision, col_description(format('%I.%I', table_schema, table_name)::regclass,
         ordinal_position::int) AS comment
       FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position`,
    ),
    constraints: await rows(
      client,
      schema,
      `SELECT c.conrelid::regclass::text AS relation, c.conname, c.contype, pg_get_constraintdef(c.oid) AS definition
       FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1
       ORDER BY relation, c.conname`,
    ),
    indexes: await rows(
      client,
      schema,
      'SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY tablename, indexname',
    ),
  }
}

/** A packed claim answer (`_claim_v3`'s `r`) with its time (the lease's end, the wait, the replay window's end) as `ms`. */
function packedWithoutTimes(value: unknown): string[] {
  const fields = String(value).split(' ')
  const at = /^(IN_PROGRESS|COMPLETED_REPLAY)$/.test(fields[0] ?? '') ? 1 : 4
  return fields.map((field, i) => (i === at ? 'ms' : field))
}

describe('the PostgreSQL schema', () => {
  const suffix = randomBytes(4).toString('hex')
  const migrated = `idem_migrated_${suffix}`
  const fresh = `idem_fresh_${suffix}`
  let admin: pg.Client
  let pool: pg.Pool
  let stores: PostgresStore[]

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    admin.on('error', () => undefined)
    await admin.connect()
    pool = testPostgresPool()
    stores = []
  })

  afterAll(async () => {
    for (const store of stores) await store.close()
    await pool.end()
    await admin.query(`DROP SCHEMA IF EXISTS ${migrated} CASCADE; DROP SCHEMA IF EXISTS ${fresh} CASCADE`)
    await admin.end()
  })

  function store(schema: string): PostgresStore {
    const opened = postgresStore({ pool, schema, keyPrefix: 'test', sweepIntervalMs: 0 })
    stores.push(opened)
    return opened
  }

  it("is the same on a new database as on one of every earlier release's brought up to date by migrate()", async () => {
    // Every release's own files are there, one per schema version up to this one.
    expect(RELEASED_VERSIONS).toEqual(Array.from({ length: POSTGRES_SCHEMA_VERSION }, (_, i) => i + 1))
    expect(migrationFiles().map((migration) => migration.version)).toEqual([...RELEASED_VERSIONS])
    // At the current version already, migrationSql() has nothing to apply, as migrate() applies nothing.
    expect(migrationSql(fresh, TABLE, POSTGRES_SCHEMA_VERSION)).toBe('')

    // An empty database: migrate() applies every numbered file and the functions' files, and records the version.
    const fromEmpty = store(fresh)
    expect(await fromEmpty.schemaVersion()).toBe(0)
    expect(await fromEmpty.migrate()).toEqual({ version: POSTGRES_SCHEMA_VERSION })
    expect(await fromEmpty.schemaVersion()).toBe(POSTGRES_SCHEMA_VERSION)
    const expected = await catalog(admin, fresh)
    // What the comparison covers is there: the three tables, every function the store calls.
    expect(expected.tables).toHaveLength(3)
    expect(expected.functions.length).toBeGreaterThan(10)
    expect(expected.indexes).toHaveLength(4)

    // A database as each release left it (its files 001 to N, functions included, each release's
    // in a transaction of its own), then migrate() of this version: the same catalog. At N, the
    // current version, migrate() finds nothing to do, so the release's own files must already
    // agree with the numbered files and the functions' files.
    for (const version of RELEASED_VERSIONS) {
      const old = `${migrated}_${version}`
      await admin.query(`CREATE SCHEMA ${old}`)
      try {
        for (const release of RELEASED_VERSIONS.filter((v) => v <= version)) {
          await admin.query(`BEGIN; ${releasedFile(release, old, TABLE)}; COMMIT`)
        }
        const upgraded = store(old)
        expect(await upgraded.schemaVersion()).toBe(version)
        expect(await upgraded.migrate()).toEqual({ version: POSTGRES_SCHEMA_VERSION })
        const found = await catalog(admin, old)
        for (const part of ['functions', 'tables', 'columns', 'constraints', 'indexes'] as const) {
          expect(found[part], `${part} from schema ${version}`).toEqual(expected[part])
        }
      } finally {
        await admin.query(`DROP SCHEMA ${old} CASCADE`)
      }
    }
  }, 60_000)

  it("answers every claim of the earlier versions' entry points (_claim_v2, _claim_v3) as their own steps did", async () => {
    // Schema 6's database, where `_claim_v2` and `_claim_v3` are each a copy of the steps, beside
    // this version's, where they call `_claim_v4` (schema 7): the same calls on the same keys,
    // answer by answer.
    const before = `idem_before_${suffix}`
    const now = `idem_now_${suffix}`
    await admin.query(`CREATE SCHEMA ${before}; CREATE SCHEMA ${now}`)
    await admin.query(releasedSql(6, before, TABLE))
    expect(await store(now).migrate()).toEqual({ version: POSTGRES_SCHEMA_VERSION })
    try {
      const answers = async (schema: string) => {
        const seen: unknown[] = []
        const claim = async (fn: 'v2' | 'v3', key: string, owner: string, o: Partial<Record<string, unknown>> = {}) => {
          const args = [key, owner, o.fp ?? 'f1', 'op', 'c', 'p', o.start ?? true, o.takeover ?? false]
          const more = [o.leaseMs ?? 60_000, 60_000, o.legacy ?? [], 2_000]
          const columns = fn === 'v2' ? '*' : 'r, resp, codec, policy'
          const { rows } = await admin.query(
            `SELECT ${columns} FROM ${schema}.${TABLE}_claim_${fn}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
            [...args, ...more],
          )
          // Times differ from run to run: their presence is compared, and every other field.
          const row = rows[0] as Record<string, unknown>
          const times = /^(lease_until|retry_after_ms|replay_until)$/
          const kept = Object.entries(row).map(([name, value]) =>
            times.test(name) ? [name, value !== null] : [name, name === 'r' ? packedWithoutTimes(value) : value],
          )
          seen.push([fn, key, Object.fromEntries(kept)])
          return row
        }
        const transition = (fn: string, key: string, owner: string, attempt: number, rev: number, extra: unknown[]) =>
          admin.query(`SELECT * FROM ${schema}.${TABLE}_${fn}($1, $2, $3, $4, ${extra.map((_, i) => `$${i + 5}`)})`, [
            key,
            owner,
            attempt,
            rev,
            ...extra,
          ])
        for (const fn of ['v2', 'v3'] as const) {
          const k = (name: string) => `${fn}:${name}`
          // Steps 1, 5, 8 and 2 (a legacy fingerprint counts as a match).
          await claim(fn, k('a'), 'o1')
          await claim(fn, k('a'), 'o1')
          await claim(fn, k('a'), 'o2')
          await claim(fn, k('a'), 'o2', { fp: 'f2' })
          await claim(fn, k('a'), 'o2', { fp: 'f2', legacy: ['f1'] })
          await claim(fn, k('b'), 'o1', { start: false })
          // Step 3: completed.
          await transition('complete_v3', k('a'), 'o1', 1, 1, [60_000, Buffer.from('done'), 2_000])
          await claim(fn, k('a'), 'o3')
          // Step 4: abandoned, with and without takeover.
          await claim(fn, k('c'), 'o1')
          await transition('mark_failed_v2', k('c'), 'o1', 1, 1, [false, 60_000, 2_000])
          await claim(fn, k('c'), 'o2', { takeover: true })
          await claim(fn, k('c'), 'o2')
          // Step 6: failed, retryable.
          await claim(fn, k('d'), 'o1')
          await transition('mark_failed_v2', k('d'), 'o1', 1, 1, [true, 60_000, 2_000])
          await claim(fn, k('d'), 'o2')
          // Step 7: a lease run out, recovered or taken over; a CLAIMED one taken over.
          await claim(fn, k('e'), 'o1', { leaseMs: 1 })
          await claim(fn, k('f'), 'o1', { leaseMs: 1, start: false })
          await sleep(20)
          await claim(fn, k('e'), 'o2')
          await claim(fn, k('e'), 'o2', { takeover: true })
          await claim(fn, k('f'), 'o2')
        }
        return seen
      }
      const [old, current] = [await answers(before), await answers(now)]
      expect(old).toHaveLength(34)
      expect(current).toEqual(old)
    } finally {
      await admin.query(`DROP SCHEMA ${before} CASCADE; DROP SCHEMA ${now} CASCADE`)
    }
  })
})
