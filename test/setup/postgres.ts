/**
 * vitest global setup: one throwaway PostgreSQL cluster (initdb, then postgres on a free
 * 127.0.0.1 port, fsync off) for the whole run, with the store's table migrated, stopped by PID
 * when the run ends. Test files reach it with `inject('postgresUrl')`.
 */
import 'vitest'
import pg from 'pg'
import type { TestProject } from 'vitest/node'
import { type PostgresServer, startPostgresServer } from '../../scripts/postgres-server.js'
import { PostgresStore } from '../../src/stores/postgres/postgres-store.js'

declare module 'vitest' {
  export interface ProvidedContext {
    postgresUrl: string
    postgresPid: number
    postgresDir: string
  }
}

let server: PostgresServer | undefined

export async function setup(project: TestProject): Promise<void> {
  server = await startPostgresServer()
  const pool = new pg.Pool({ connectionString: server.url, max: 1 })
  try {
    await new PostgresStore({ pool, sweepIntervalMs: 0 }).migrate()
  } finally {
    await pool.end()
  }
  project.provide('postgresUrl', server.url)
  project.provide('postgresPid', server.pid)
  project.provide('postgresDir', server.dir)
}

export async function teardown(): Promise<void> {
  await server?.stop()
}
