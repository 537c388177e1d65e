/**
 * A Redis Cluster of three masters: the apps reach the nodes at the addresses the cluster gives,
 * with no proxy in between. Its faults: one node paused, slots resharded under load, and the
 * scripts flushed or the clients killed on every node.
 */
import { Cluster } from 'ioredis'
import { redisStore } from '../../../src/stores/redis/index.js'
import { startRedisCluster } from '../../helpers/redis-cluster.js'
import { type Admin, ownClient, redisAdminFaults } from './redis.js'
import { type Deployment, sleep } from './types.js'

export async function startClusterDeployment(): Promise<Deployment> {
  const cluster = await startRedisCluster()
  const admin: Admin = async (node) => ownClient(cluster.nodes[node]?.port as number)
  return {
    proxiedPort: undefined,
    env: () => ({ REDIS_CLUSTER: cluster.startupNodes }),
    faults: {
      'store-pause': async ({ fault, instance }) => {
        const node = cluster.nodes[instance]
        if (node === undefined) return undefined
        process.kill(node.pid, 'SIGSTOP')
        await sleep(fault.durationMs)
        process.kill(node.pid, 'SIGCONT')
        return `node ${node.port}`
      },
      reshard: async ({ instance }) => {
        await cluster.reshard(instance, (instance + 1) % 3, 200)
        return `200 slots from node ${instance} to node ${(instance + 1) % 3}`
      },
      ...redisAdminFaults(admin, 3),
    },
    async reader() {
      const client = new Cluster(
        cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })),
        { redisOptions: { commandTimeout: 5_000, maxRetriesPerRequest: 1 } },
      )
      client.on('error', () => {})
      return { store: redisStore({ redis: client }), close: async () => client.disconnect() }
    },
    databaseUrl: () => undefined,
    stop: () => cluster.stop(),
  }
}
