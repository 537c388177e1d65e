/** The store deployments of the nemesis run, one per store mode. */
import type { StoreMode } from '../schedule.js'
import { startClusterDeployment } from './cluster.js'
import { startPostgresDeployment, startPostgresHaDeployment } from './postgres.js'
import { startRedisDeployment } from './redis.js'
import { startSentinelDeployment } from './sentinel.js'
import type { Deployment } from './types.js'

export type { Deployment, FaultWindow, StoreFault } from './types.js'

const starters: Record<StoreMode, () => Promise<Deployment>> = {
  redis: startRedisDeployment,
  sentinel: startSentinelDeployment,
  cluster: startClusterDeployment,
  postgres: startPostgresDeployment,
  'postgres-ha': startPostgresHaDeployment,
}

export function startDeployment(mode: StoreMode): Promise<Deployment> {
  return starters[mode]()
}
