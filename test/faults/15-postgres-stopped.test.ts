/**
 * Fault 15: the PostgreSQL server stopped (immediate shutdown, as `pg_ctl stop -m immediate`)
 * when requests arrive to claim: 503 store-unavailable with Retry-After and the handler not
 * run; after a restart on the same data, each key runs exactly once and then replays.
 */
import { startFaultPostgres } from '../helpers/fault-postgres.js'
import { describeStoreStoppedFault } from './store-stopped.js'

describeStoreStoppedFault({
  fault: '15',
  store: 'PostgreSQL',
  // A first request opens pool connections, so the stop also drops live ones.
  warmUp: true,
  timed: true,
  async start() {
    const postgres = await startFaultPostgres()
    return {
      appEnv: { DATABASE_URL: postgres.url },
      stop: () => postgres.stopImmediate(),
      restart: () => postgres.restart(),
      teardown: () => postgres.stop(),
    }
  },
})
