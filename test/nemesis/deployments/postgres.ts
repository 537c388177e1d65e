/**
 * PostgreSQL, one server (paused, or shut down immediately and restarted) or a primary with a
 * synchronous standby behind a router (postgres-ha: the standby promoted midway), reached
 * through the run's proxies.
 */
import pg from 'pg'
import { postgresStore } from '../../../src/stores/postgres/index.js'
import { startFaultPostgres } from '../../helpers/fault-postgres.js'
import { type PostgresHa, startPostgresHa } from '../postgres-ha.js'
import { type Deployment, sleep } from './types.js'

const env = (proxyPort: number | undefined) => ({
  DATABASE_URL: `postgres://postgres@127.0.0.1:${proxyPort}/postgres`,
})

function reader(databaseUrl: string): Awaited<ReturnType<Deployment['reader']>> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 })
  return { store: postgresStore({ pool, sweepIntervalMs: 0 }), close: () => pool.end() }
}

export async function startPostgresDeployment(): Promise<Deployment> {
  const postgres = await startFaultPostgres()
  return {
    proxiedPort: postgres.port,
    env,
    faults: {
      'store-pause': async ({ fault }) => {
        postgres.pause()
        await sleep(fault.durationMs)
        postgres.resume()
        return undefined
      },
      'pg-immediate': async ({ fault }) => {
        await postgres.stopImmediate()
        await sleep(fault.durationMs)
        await postgres.restart()
        return undefined
      },
    },
    reader: async () => reader(postgres.url),
    databaseUrl: () => postgres.url,
    stop: () => postgres.stop(),
  }
}

export async function startPostgresHaDeployment(): Promise<Deployment> {
  const ha: PostgresHa = await startPostgresHa()
  return {
    proxiedPort: ha.port,
    env,
    faults: {
      promote: async ({ fault, start, now }) => {
        const gap = await ha.promote()
        await sleep(start + fault.durationMs - now())
        return `the old primary cut off and killed, the standby promoted: no primary for ${gap} ms`
      },
    },
    reader: async () => reader(ha.primaryUrl()),
    databaseUrl: () => ha.primaryUrl(),
    stop: () => ha.stop(),
  }
}
