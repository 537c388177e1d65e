/**
 * The PostgreSQL store's schema and how a database gets to it: the SQL files next to this module
 * (the numbered files, each version's table changes and its version, and the three files of
 * `sql/functions/`, every function as it runs now, applied after them on every path), the schema
 * version a database is at (the table's comment, read from the catalog without a lock), and
 * `migrate()`, safe to run from every instance at startup.
 */
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { type IdempotencyError, StoreUnavailableError } from '../../core/errors.js'
import type { Connection, PostgresClient } from './connection.js'
import { postgresFault } from './faults.js'
import type { PostgresSettings } from './options.js'
import { lockKey, prepared, type Statement } from './statements.js'
import { migrateRefused } from './verify.js'

/**
 * The tables' changes `sql/<NNN>-<name>.sql` and the functions `sql/functions/<N>-<name>.sql`, next
 * to this module (copied next to the compiled module by the build).
 */
const SQL_DIR = fileURLToPath(new URL('./sql/', import.meta.url))
const FUNCTIONS_DIR = join(SQL_DIR, 'functions')
/** The schema's version: the number of the last migration file, which it records as the table's comment. */
export const POSTGRES_SCHEMA_VERSION = 11

/** The numbered migration files (the tables' changes) in order: `{ version, file }`. */
export function migrationFiles(): readonly { readonly version: number; readonly file: string }[] {
  return readdirSync(SQL_DIR)
    .filter((name) => /^\d{3}-[a-z0-9-]+\.sql$/.test(name))
    .sort()
    .map((name) => ({ version: Number(name.slice(0, 3)), file: join(SQL_DIR, name) }))
}

/**
 * The functions' files, `sql/functions/*.sql` in name order, the order they apply in: the shared
 * rules (`1-rules.sql`), what the store of this version calls (`2-operations.sql`), then the
 * entry points kept for earlier schema versions (`3-earlier-versions.sql`), each file after what
 * its functions call.
 */
function functionFiles(): string[] {
  return readdirSync(FUNCTIONS_DIR)
    .filter((name) => name.endsWith('.sql'))
    .sort()
    .map((name) => join(FUNCTIONS_DIR, name))
}

/**
 * The SQL that brings one schema and table from schema version `from` to this version's, what
 * `migrate()` applies, for teams that run migrations themselves: the numbered files after `from`
 * in order (all of them for a database without the table, `from` 0, the default), then the
 * functions' files of `sql/functions/` in name order. Every `from` ends in the same tables,
 * indexes and functions as a new database (test/stores/postgres/schema.test.ts, against the
 * releases' own files).
 */
export function migrationSql(schema: string, table: string, from = 0): string {
  const files = migrationFiles()
    .filter((migration) => migration.version > from)
    .map((migration) => migration.file)
  // At this version already: nothing to apply, as migrate() applies nothing.
  if (files.length === 0) return ''
  return [...files, ...functionFiles()]
    .map((file) => readFileSync(file, 'utf8'))
    .join('\n')
    .replaceAll('{{schema}}', schema)
    .replaceAll('{{table}}', table)
}

/** The schema version in a `[comment, exists]` row of the catalog: 0 when the table is not there. */
function versionOf(row: readonly unknown[] | undefined): number {
  if (row?.[1] !== true) return 0
  const match = /^idemkit records, schema (\d+)$/.exec(String(row[0]))
  // A table of the store's without a comment of its own was made by hand: schema 1's layout.
  return match === null ? 1 : Number(match[1])
}

/** The schema of one store's table: its version, and `migrate()`. */
export class Migrations {
  readonly #connection: Connection
  readonly #settings: PostgresSettings
  /** The catalog read of the version (`statements().schemaVersion`). */
  readonly #versionStatement: Statement
  /** The table's qualified name. */
  readonly #table: string

  constructor(connection: Connection, versionStatement: Statement, settings: PostgresSettings) {
    this.#connection = connection
    this.#versionStatement = versionStatement
    this.#settings = settings
    this.#table = `${settings.schema}.${settings.table}`
  }

  /**
   * The schema version in place, read from the catalog (the table's comment): no lock on the
   * table, nothing written. 0 when the table is not there.
   * @throws StoreUnavailableError when no connection could be had.
   */
  async version(): Promise<number> {
    const { rows } = await this.#connection.query(prepared(this.#versionStatement, [this.#table]))
    return versionOf(rows[0])
  }

  /**
   * Brings the table and its functions to this version's schema, in one transaction under an
   * advisory lock; at this version already it only reads the catalog (see
   * `PostgresStore.migrate`). When a lock is not had within `lockTimeoutMs` it rolls back,
   * reports `migrate-waiting` with the sessions holding it, pauses and tries again,
   * `migrateAttempts` times in all.
   * @returns the schema version now in place.
   * @throws StoreUnavailableError when no connection could be had, the lock could not be had
   *   in `migrateAttempts` tries (the message names its holders), or PostgreSQL refused.
   */
  async migrate(): Promise<{ readonly version: number }> {
    const found = await this.version()
    if (found >= POSTGRES_SCHEMA_VERSION) return { version: found }
    const { lockTimeoutMs, migrateAttempts, emit } = this.#settings
    for (let attempt = 1; ; attempt++) {
      const waitedOn = await this.#migrateOnce()
      if (waitedOn === undefined) return { version: POSTGRES_SCHEMA_VERSION }
      const message =
        `migrate() waited ${lockTimeoutMs} ms (lockTimeoutMs) for a lock on ${this.#table} ` +
        `(try ${attempt} of ${migrateAttempts}); held by ${waitedOn}`
      if (attempt >= migrateAttempts) {
        throw new StoreUnavailableError(`${message}. Nothing was changed; run migrate() again once they end.`)
      }
      emit({ type: 'migrate-waiting', message, attempt })
      await new Promise((resolve) => setTimeout(resolve, Math.min(5_000, 100 * 2 ** attempt)))
    }
  }

  /**
   * One try of `migrate()`: `undefined` once applied (or found applied under the lock), else,
   * after a lock timeout, who holds the locks it waited for. Nothing of a failed try is kept.
   */
  #migrateOnce(): Promise<string | undefined> {
    const { schema, table, lockTimeoutMs } = this.#settings
    return this.#connection
      .withClient(async ({ client }) => {
        try {
          await client.query(`BEGIN; SET LOCAL lock_timeout = '${lockTimeoutMs}ms'`)
          try {
            await client.query(`SELECT pg_advisory_xact_lock(${lockKey('migrate', schema, table)})`)
            // Under the lock: another instance may have applied it meanwhile.
            const { rows } = await client.query(prepared(this.#versionStatement, [this.#table]))
            const version = versionOf(rows[0])
            if (version < POSTGRES_SCHEMA_VERSION) {
              if (schema !== 'public') await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`)
              await client.query(migrationSql(schema, table, version))
            }
            await client.query('COMMIT')
            return undefined
          } catch (error) {
            if ((error as { code?: unknown }).code !== '55P03') throw error
            await client.query('ROLLBACK')
            return await this.#lockHolders(client)
          }
        } catch (error) {
          // After an ERROR the connection goes back to the pool once rolled back; after anything
          // else withClient destroys it.
          if ((error as { severity?: unknown }).severity === 'ERROR') await client.query('ROLLBACK').catch(ignore)
          if ((error as { code?: unknown }).code === '42501') throw await this.#refused(client, error)
          throw error
        }
      })
      .catch((error: unknown) => {
        throw postgresFault(error, true)
      })
  }

  /** A migration refused for want of a privilege: who tried, and who owns the schema (verify.ts). */
  async #refused(client: PostgresClient, error: unknown): Promise<IdempotencyError> {
    const { schema } = this.#settings
    const result = (await client
      .query({
        name: 'idemkit_migrate_refused_1',
        text: `SELECT current_user::text, coalesce((SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = $1),
          (SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()))`,
        values: [schema],
        rowMode: 'array',
      })
      .catch(() => ({ rows: [['the connecting role', 'the schema owner']] }))) as { rows: unknown[][] }
    const [role, owner] = (result.rows[0] ?? []).map(String) as [string, string]
    return migrateRefused(error, role, owner, schema)
  }

  /** The other sessions holding a lock on the table or the migration's advisory lock, for a message. */
  async #lockHolders(client: PostgresClient): Promise<string> {
    const { schema, table } = this.#settings
    const key = BigInt(lockKey('migrate', schema, table))
    const high = Number(BigInt.asUintN(64, key) >> 32n)
    const low = Number(BigInt.asUintN(32, key))
    const result = (await client.query(
      `SELECT string_agg(DISTINCT format('pid %s (%s, %s, transaction open %s ms: %s)', a.pid, coalesce(a.application_name, ''),
          a.state, coalesce(round(extract(epoch FROM clock_timestamp() - a.xact_start) * 1000), 0),
          left(regexp_replace(coalesce(a.query, ''), '\\s+', ' ', 'g'), 80)), '; ')
       FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
       WHERE l.granted AND a.pid <> pg_backend_pid()
         AND (l.relation = to_regclass('${this.#table}')
           OR (l.locktype = 'advisory' AND l.classid::bigint = ${high} AND l.objid::bigint = ${low}))`,
    )) as { rows: Record<string, unknown>[] }
    const holders = Object.values(result.rows[0] ?? {})[0]
    return typeof holders === 'string' ? holders : 'a session that has ended since'
  }
}

function ignore(): void {}
