/**
 * What the PostgreSQL store checks about its database for the role it connects as, in
 * `verify()` and in the startup report: the schema version in place, the privileges every call
 * needs (USAGE on the schema; SELECT, INSERT, UPDATE, DELETE on the table, its leases table and
 * its steps table;
 * EXECUTE on its functions) and the database's clock against this process's. Every finding
 * names the fix: the GRANT to run as the owner, or `idemkit migrate`.
 *
 * The catalog is read by name (pg_class, pg_namespace, pg_proc), never through `to_regclass`,
 * so a role without USAGE on the schema still gets an answer instead of "permission denied".
 */
import { ErrorCode, IdempotencyError } from '../../core/errors.js'
import type { Connection } from './connection.js'
import type { PostgresSettings } from './options.js'

/** What `verify()` found: all of it fine, else it threw. */
export interface PostgresVerifyReport {
  /** The role the pool connects as (`current_user`). */
  readonly role: string
  /** The table's owner: the role to run `idemkit migrate` and the GRANTs as. */
  readonly owner: string
  /** The schema version in place (the table's comment). */
  readonly schemaVersion: number
  /** The database's clock minus this process's, in milliseconds (half a round trip of error). */
  readonly clockOffsetMs: number
}

/** What the checks found, fine or not (the startup report turns each finding into a warning). */
export interface PostgresFindings extends PostgresVerifyReport {
  /** The table is missing or behind: run `idemkit migrate`. */
  readonly schemaProblem: string | undefined
  /** Privileges the role lacks, and the GRANTs that give them; empty when it has them all. */
  readonly missing: readonly string[]
  readonly grants: readonly string[]
}

/** Beyond this, the database's clock and the app's disagree enough to be worth a warning. */
const CLOCK_WARNING_MS = 1_000
const TABLE_PRIVILEGES = ['SELECT', 'INSERT', 'UPDATE', 'DELETE'] as const

/** The one catalog read of the checks: $1 schema, $2 table, $3 leases table, $4 the functions' LIKE pattern, $5 steps table. */
const CHECK_SQL = `
WITH ns AS (SELECT oid, nspowner FROM pg_namespace WHERE nspname = $1),
  rel AS (SELECT c.oid, c.relname, c.relowner FROM pg_class c JOIN ns ON c.relnamespace = ns.oid
    WHERE c.relname IN ($2, $3, $5) AND c.relkind IN ('r', 'p'))
SELECT current_user::text,
  (SELECT pg_get_userbyid(coalesce((SELECT relowner FROM rel WHERE relname = $2), (SELECT nspowner FROM ns)))),
  (SELECT has_schema_privilege(oid, 'USAGE') FROM ns),
  (SELECT obj_description(oid, 'pg_class') FROM rel WHERE relname = $2),
  (SELECT count(*) FROM rel WHERE relname = $2)::int,
  (SELECT string_agg(rel.relname || ':' || p.priv, ',' ORDER BY rel.relname, p.priv) FROM rel
    CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS p(priv)
    WHERE NOT has_table_privilege(rel.oid, p.priv)),
  (SELECT string_agg(f.oid::regprocedure::text, ', ' ORDER BY f.oid::regprocedure::text) FROM pg_proc f JOIN ns ON f.pronamespace = ns.oid
    WHERE f.proname LIKE $4 AND NOT has_function_privilege(f.oid, 'EXECUTE')),
  floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`

/** Reads the catalog and the clock for the pool's role, and says what is wrong and how to fix it. */
export async function findings(
  connection: Connection,
  settings: Pick<PostgresSettings, 'schema' | 'table'>,
  wanted: number,
): Promise<PostgresFindings> {
  const { schema, table } = settings
  const before = Date.now()
  const { rows } = await connection.query({
    name: 'idemkit_verify_2',
    text: CHECK_SQL,
    values: [schema, table, `${table}_leases`, `${table.replaceAll('_', '\\_')}\\_%\\_v_`, `${table}_steps`],
    rowMode: 'array',
  })
  const after = Date.now()
  const [role, owner, usage, comment, exists, tables, functions, clock] = (rows[0] ?? []) as unknown[]
  const qualified = `${schema}.${table}`
  const schemaVersion = Number(exists) === 0 ? 0 : versionOfComment(comment)
  const missing: string[] = []
  const grants: string[] = []
  if (usage === false) {
    missing.push(`USAGE on schema ${schema}`)
    grants.push(`GRANT USAGE ON SCHEMA ${schema} TO ${role};`)
  }
  if (typeof tables === 'string') {
    const byTable = new Map<string, string[]>()
    for (const pair of tables.split(',')) {
      const [name, privilege] = pair.split(':') as [string, string]
      byTable.set(name, [...(byTable.get(name) ?? []), privilege])
    }
    for (const [name, privileges] of byTable) {
      const ordered = TABLE_PRIVILEGES.filter((privilege) => privileges.includes(privilege))
      missing.push(`${ordered.join(', ')} on ${schema}.${name}`)
      grants.push(`GRANT ${ordered.join(', ')} ON ${schema}.${name} TO ${role};`)
    }
  }
  if (typeof functions === 'string') {
    missing.push(`EXECUTE on ${functions}`)
    grants.push(`GRANT EXECUTE ON FUNCTION ${functions} TO ${role};`)
  }
  const schemaProblem =
    schemaVersion === 0
      ? `${qualified} does not exist: run idemkit migrate (or store.migrate()) as a role that may create it in schema ${schema} (its owner, ${owner ?? 'unknown'})`
      : schemaVersion < wanted
        ? `${qualified} is at schema ${schemaVersion}, this version needs ${wanted}: run idemkit migrate (or store.migrate()) as its owner, ${owner}`
        : undefined
  return {
    role: String(role),
    owner: String(owner ?? 'unknown'),
    schemaVersion,
    clockOffsetMs: Number(clock) - Math.round((before + after) / 2),
    schemaProblem,
    missing,
    grants,
  }
}

/** The schema version a table's comment names (schema 1's tables had none). */
export function versionOfComment(comment: unknown): number {
  const match = /^idemkit records, schema (\d+)$/.exec(String(comment))
  return match === null ? 1 : Number(match[1])
}

/** The findings as startup warnings: one per problem, each with its fix. */
export function findingWarnings(found: PostgresFindings): string[] {
  const warnings: string[] = []
  if (found.missing.length > 0) {
    warnings.push(
      `role ${found.role} lacks ${found.missing.join('; ')}: every call will answer 503. As ${found.owner}, run: ${found.grants.join(' ')}`,
    )
  }
  if (Math.abs(found.clockOffsetMs) > CLOCK_WARNING_MS) {
    warnings.push(
      `the database's clock is ${found.clockOffsetMs} ms from this process's: leases and expiries follow the database's; times this process shows will differ`,
    )
  }
  return warnings
}

/**
 * `verify()`: the findings, or `ERR_IDEM_STORE_MISCONFIGURED` naming each problem and its fix
 * (the table missing or behind, privileges the role lacks with the GRANTs to run).
 */
export async function verifyPostgres(
  connection: Connection,
  settings: Pick<PostgresSettings, 'schema' | 'table'>,
  wanted: number,
): Promise<PostgresVerifyReport> {
  const found = await findings(connection, settings, wanted)
  const problems: string[] = []
  if (found.schemaProblem !== undefined) problems.push(found.schemaProblem)
  if (found.missing.length > 0) {
    problems.push(
      `role ${found.role} lacks ${found.missing.join('; ')}; as ${found.owner} (or a superuser), run: ${found.grants.join(' ')}`,
    )
  }
  if (problems.length > 0) {
    throw new IdempotencyError(
      ErrorCode.STORE_MISCONFIGURED,
      `The PostgreSQL store cannot run on ${settings.schema}.${settings.table}: ${problems.join('. ')}.`,
    )
  }
  const { role, owner, schemaVersion, clockOffsetMs } = found
  return { role, owner, schemaVersion, clockOffsetMs }
}

/**
 * The error of a `migrate()` PostgreSQL refused for want of a privilege (SQLSTATE 42501): which
 * role, what it may not do, and the two ways out: run `idemkit migrate` as the owner, or GRANT
 * CREATE on the schema.
 */
export function migrateRefused(error: unknown, role: string, owner: string, schema: string): IdempotencyError {
  const message = error instanceof Error ? error.message : String(error)
  return new IdempotencyError(
    ErrorCode.STORE_MISCONFIGURED,
    `migrate() as role ${role} was refused (SQLSTATE 42501: ${message}); nothing was changed. Creating the table and its ` +
      `functions needs CREATE on schema ${schema}: run idemkit migrate --store <url as ${owner}> (or store.migrate() ` +
      `on a pool of ${owner}), or, as ${owner}, GRANT CREATE ON SCHEMA ${schema} TO ${role}; the app's role then needs ` +
      'only the privileges store.verify() lists.',
    { cause: error },
  )
}
