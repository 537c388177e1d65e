/**
 * A Redis Cluster of three masters: the apps reach the nodes at the addresses the cluster gives,
 * with no proxy in between. Its faults: one node paused, slots resharded under load, the scripts
 * flushed or the clients killed on every node, and the masters' clocks stepped (clock.ts), each
 * master's wall clock its own (20, 18 and 22 s ahead of the apps'), so a key's slot moved by a
 * reshard reads another clock.
 */
import { Cluster } from 'ioredis'
import { redisStore } from '../../../src/stores/redis/index.js'
import { startRedisCluster } from '../../helpers/redis-cluster.js'
import { clockShims, clockStep, redisOffset, startedUnder } from './clock.js'
import { type Admin, ownClient, redisAdminFaults } from './redis.js'
import { type Deployment, sleep } from './types.js'

/** Each master's wall clock against the first's, ms. */
const MASTER_OFFSETS_MS = [0, -2_000, 2_000] as const

export async function startClusterDeployment(): Promise<Deployment> {
  const clocks = clockShims(MASTER_OFFSETS_MS)
  const cluster = await startedUnder(clocks, startRedisCluster({ env: (node) => ({ ...clocks.shims[node]?.env }) }))
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
      // The masters' clocks step together, each keeping its own offset; the first's is read.
      'clock-step': clockStep(
        () => clocks.shims,
        async () => {
          const { client, done } = await admin(0)
          return redisOffset(client).finally(done)
        },
      ),
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
    async stop() {
      await cluster.stop()
      clocks.remove()
    },
  }
}
