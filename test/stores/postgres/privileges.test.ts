/**
 * A role that may not do what the store needs, on the suite's own PostgreSQL with real roles:
 * migrate() without CREATE names the privilege and the two fixes; verify() lists what the app's
 * role lacks with the GRANTs to run, the schema version and the clock; the startup report warns
 * of it; a call refused for a privilege says so.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest'
import { ErrorCode, StoreUnavailableError } from '../../../src/core/errors.js'
import { POSTGRES_SCHEMA_VERSION, type PostgresStore, postgresStore } from '../../../src/stores/postgres/index.js'
import { claimRequest, testPostgresPool } from '../../helpers/stores.js'

const hex = () => randomBytes(4).toString('hex')

describe('the PostgreSQL store and its role', () => {
  let admin: pg.Client
  let schema: string
  let role: string
  const pools: pg.Pool[] = []
  const stores: PostgresStore[] = []

  /** A store whose pool connects as `as` (the suite's superuser when undefined). */
  function open(as?: string, table = 'recs'): PostgresStore {
    const url = new URL(inject('postgresUrl'))
    if (as !== undefined) url.username = as
    const pool = testPostgresPool({ connectionString: url.toString() })
    pools.push(pool)
    const store = postgresStore({ pool, schema, table, sweepIntervalMs: 0 })
    stores.push(store)
    return store
  }

  beforeEach(async () => {
    admin = new pg.Client({ connectionString: inject('postgresUrl') })
    admin.on('error', () => undefined)
    await admin.connect()
    schema = `idem_p_${hex()}`
    role = `idem_app_${hex()}`
    await admin.query(`CREATE SCHEMA ${schema}`)
    await admin.query(`CREATE ROLE ${role} LOGIN`)
  })

  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close()
    for (const pool of pools.splice(0)) await pool.end()
    await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    await admin.query(`DROP OWNED BY ${role}`)
    await admin.query(`DROP ROLE ${role}`)
    await admin.end()
  })

  it('migrate() as a role without CREATE names the role, the privilege and the fixes, not "unavailable"', async () => {
    await admin.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`)
    const { rows } = await admin.query('SELECT current_user')
    const owner = rows[0].current_user as string
    const error = await open(role)
      .migrate()
      .then(
        () => undefined,
        (thrown: unknown) => thrown,
      )
    expect(error).not.toBeInstanceOf(StoreUnavailableError)
    expect(error).toMatchObject({ code: ErrorCode.STORE_MISCONFIGURED })
    const message = (error as Error).message
    expect(message).toContain(`migrate() as role ${role} was refused (SQLSTATE 42501`)
    expect(message).toContain(`needs CREATE on schema ${schema}`)
    expect(message).toContain(`run idemkit migrate --store <url as ${owner}>`)
    expect(message).toContain(`GRANT CREATE ON SCHEMA ${schema} TO ${role}`)
    // Nothing was made.
    expect((await admin.query('SELECT to_regclass($1) AS t', [`${schema}.recs`])).rows[0].t).toBeNull()
  })

  it('verify() lists what the role lacks with the GRANTs to run, and passes once they are run', async () => {
    const owner = open()
    await owner.migrate()
    const app = open(role)
    const refused = await app.verify().then(
      () => undefined,
      (thrown: unknown) => thrown,
    )
    expect(refused).toMatchObject({ code: ErrorCode.STORE_MISCONFIGURED })
    const message = (refused as Error).message
    expect(message).toContain(`role ${role} lacks USAGE on schema ${schema}`)
    expect(message).toContain(`SELECT, INSERT, UPDATE, DELETE on ${schema}.recs;`)
    expect(message).toContain(`SELECT, INSERT, UPDATE, DELETE on ${schema}.recs_leases`)
    // Run the GRANTs the message gives, as it says: the app's role may then run the store.
    const grants = message.slice(message.indexOf('run: ') + 'run: '.length).replace(/\.$/, '')
    await admin.query(grants)
    const report = await app.verify()
    expect(report).toMatchObject({ role, schemaVersion: POSTGRES_SCHEMA_VERSION })
    expect(Math.abs(report.clockOffsetMs)).toBeLessThan(60_000)
    const request = claimRequest(app)
    expect((await app.claim(request)).kind).toBe('ACQUIRED')
  })

  it('verify() names a function the role may not execute, and a table that is missing or behind', async () => {
    const owner = open()
    await owner.migrate()
    await admin.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`)
    await admin.query(
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ${schema}.recs, ${schema}.recs_leases, ${schema}.recs_steps TO ${role}`,
    )
    await admin.query(`REVOKE EXECUTE ON FUNCTION ${schema}.recs_claim_v3 FROM PUBLIC`)
    await expect(open(role).verify()).rejects.toThrow(
      new RegExp(
        `lacks EXECUTE on ${schema}\\.recs_claim_v3\\(.*GRANT EXECUTE ON FUNCTION ${schema}\\.recs_claim_v3\\(`,
      ),
    )
    await expect(open(role, 'absent').verify()).rejects.toThrow(`${schema}.absent does not exist: run idemkit migrate`)
    await admin.query(`COMMENT ON TABLE ${schema}.recs IS 'idemkit records, schema 3'`)
    await expect(open(undefined).verify()).rejects.toThrow(
      `${schema}.recs is at schema 3, this version needs ${POSTGRES_SCHEMA_VERSION}`,
    )
  })

  it('the startup report warns of the missing grants, and a refused call points to verify()', async () => {
    const owner = open()
    await owner.migrate()
    await admin.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`)
    const app = open(role)
    const report = await app.describe()
    expect(report.warnings.join('\n')).toContain(`role ${role} lacks SELECT, INSERT, UPDATE, DELETE on ${schema}.recs`)
    expect(report.warnings.join('\n')).toContain(`GRANT SELECT, INSERT, UPDATE, DELETE ON ${schema}.recs TO ${role};`)
    const error = await app.claim(claimRequest(app)).then(
      () => undefined,
      (thrown: unknown) => thrown,
    )
    expect(error).toBeInstanceOf(StoreUnavailableError)
    expect((error as Error).message).toContain('store.verify() names them')
    // Without USAGE on the schema, the report still comes, with the warning.
    await admin.query(`REVOKE USAGE ON SCHEMA ${schema} FROM ${role}`)
    expect((await app.describe()).warnings.join('\n')).toContain(`lacks USAGE on schema ${schema}`)
  })
})
