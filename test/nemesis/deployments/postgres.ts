/**
 * PostgreSQL, one server (paused, shut down immediately and restarted, or its wall clock stepped:
 * it runs 20 s ahead under the clock shim, clock.ts) or a primary with a synchronous standby
 * behind a router (postgres-ha: the standby promoted midway; both servers' clocks under the shim,
 * the standby's 4 s behind the primary's, and stepped), reached through the run's proxies.
 */
import pg from 'pg'
import { postgresStore } from '../../../src/stores/postgres/index.js'
import { buildClockShim } from '../../helpers/clock-shim.js'
import { startFaultPostgres } from '../../helpers/fault-postgres.js'
import { type PostgresHa, startPostgresHa } from '../postgres-ha.js'
import { clockShims, clockStep, INITIAL_SHIFT_MS, startedUnder } from './clock.js'
import { type Deployment, sleep } from './types.js'

const env = (proxyPort: number | undefined) => ({
  DATABASE_URL: `postgres://postgres@127.0.0.1:${proxyPort}/postgres`,
})

function reader(databaseUrl: string): Awaited<ReturnType<Deployment['reader']>> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 })
  return { store: postgresStore({ pool, sweepIntervalMs: 0 }), close: () => pool.end() }
}

/**
 * The database's clock (`clock_timestamp()`) minus this process's, ms, read in a session of its
 * own each time: a restart (pg-immediate) or the promotion ends any kept one.
 */
async function databaseOffset(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 })
  client.on('error', () => undefined)
  try {
    await client.connect()
    const before = Date.now()
    const { rows } = await client.query('SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now')
    return Number(rows[0].now) - (before + Date.now()) / 2
  } finally {
    await client.end().catch(() => undefined)
  }
}

export async function startPostgresDeployment(): Promise<Deployment> {
  // The database's wall clock (`clock_timestamp()`, the leases' clock) 20 s ahead, stepped by clock-step.
  const shim = buildClockShim(INITIAL_SHIFT_MS)
  const postgres = await startFaultPostgres({ env: shim.env }).catch((error) => {
    shim.remove()
    throw error
  })
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
      'clock-step': clockStep(
        () => [shim],
        () => databaseOffset(postgres.url),
      ),
    },
    reader: async () => reader(postgres.url),
    databaseUrl: () => postgres.url,
    async stop() {
      await postgres.stop()
      shim.remove()
    },
  }
}

/** How far the standby's wall clock is behind the primary's, ms. */
const STANDBY_BEHIND_MS = 4_000

export async function startPostgresHaDeployment(): Promise<Deployment> {
  // Each server's wall clock its own: the standby's 4 s behind the primary's, so the promotion
  // steps the store's clock (`clock_timestamp()`, the leases' clock) 4 s back.
  const clocks = clockShims([0, -STANDBY_BEHIND_MS])
  const ha: PostgresHa = await startedUnder(
    clocks,
    startPostgresHa({ env: (node) => ({ ...clocks.shims[node]?.env }) }),
  )
  return {
    proxiedPort: ha.port,
    env,
    faults: {
      promote: async ({ fault, start, now }) => {
        const gap = await ha.promote()
        await sleep(start + fault.durationMs - now())
        return `the old primary cut off and killed, the standby promoted: no primary for ${gap} ms`
      },
      // Both servers' clocks step together, each keeping its own offset; the primary's is read.
      'clock-step': clockStep(
        () => clocks.shims,
        () => databaseOffset(ha.primaryUrl()),
      ),
    },
    reader: async () => reader(ha.primaryUrl()),
    databaseUrl: () => ha.primaryUrl(),
    async stop() {
      await ha.stop()
      clocks.remove()
    },
  }
}
