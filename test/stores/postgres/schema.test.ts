/**
 * The PostgreSQL store's two ways to the current schema end in the same catalog: a database taken
 * through every numbered migration in order (as the releases applied them, one each) and a new
 * one given `sql/schema.sql` alone by `migrate()`. Functions are compared by their name,
 * arguments, result, body (`prosrc`), settings (`proconfig`) and kind; tables by their columns
 * (type, default, nullability), constraints, storage options and comment (the schema version);
 * indexes by their definition. An edit to schema.sql without a migration that makes the same
 * change (or a migration without the same change in schema.sql) fails here.
 */
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import {
  migrationFiles,
  POSTGRES_SCHEMA_VERSION,
  type PostgresStore,
  postgresStore,
} from '../../../src/stores/postgres/index.js'
import { testPostgresPool } from '../../helpers/stores.js'

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

  it('is the same from schema.sql on an empty database as from every migration in order', async () => {
    // Every numbered file, one release after another, each in a transaction of its own.
    await admin.query(`CREATE SCHEMA ${migrated}`)
    const files = migrationFiles()
    expect(files.map((migration) => migration.version)).toEqual(
      Array.from({ length: POSTGRES_SCHEMA_VERSION }, (_, i) => i + 1),
    )
    for (const migration of files) {
      const sql = readFileSync(migration.file, 'utf8').replaceAll('{{schema}}', migrated).replaceAll('{{table}}', TABLE)
      await admin.query(`BEGIN; ${sql}; COMMIT`)
    }
    // At the current version already: migrate() finds nothing to do.
    expect(await store(migrated).migrate()).toEqual({ version: POSTGRES_SCHEMA_VERSION })

    // An empty database: migrate() applies schema.sql alone and records the version.
    const fromSchema = store(fresh)
    expect(await fromSchema.schemaVersion()).toBe(0)
    expect(await fromSchema.migrate()).toEqual({ version: POSTGRES_SCHEMA_VERSION })
    expect(await fromSchema.schemaVersion()).toBe(POSTGRES_SCHEMA_VERSION)

    const [left, right] = [await catalog(admin, migrated), await catalog(admin, fresh)]
    // What the comparison covers is there: both tables, every function the store calls.
    expect(left.tables).toHaveLength(2)
    expect(left.functions.length).toBeGreaterThan(10)
    expect(left.indexes).toHaveLength(3)
    for (const part of ['functions', 'tables', 'columns', 'constraints', 'indexes'] as const) {
      expect(right[part], part).toEqual(left[part])
    }
  })
})
