/**
 * Redis under Sentinel (a master, one replica, three sentinels) with `durability: { replicas: 1 }`:
 * the apps reach the nodes the sentinels name, with no proxy in between. Its faults: the master
 * paused, killed (the sentinels fail over) or its replica killed; each heals only when the master
 * has its replica online again; and both nodes' clocks stepped (clock.ts), the replica's 4 s
 * behind the master's throughout, so every failover is a step of the store's clock too.
 */
import { Redis } from 'ioredis'
import { SENTINEL_NAME, startRedisSentinel } from '../../helpers/redis-sentinel.js'
import { clockShims, clockStep, redisOffset, startedUnder } from './clock.js'
import { type Admin, ownClient, redisAdminFaults, redisReader } from './redis.js'
import { type Deployment, sleep } from './types.js'

/** How far the first replica's wall clock is behind the first master's, ms. */
const REPLICA_BEHIND_MS = 4_000

export async function startSentinelDeployment(): Promise<Deployment> {
  // Each node's wall clock its own: the replica's 4 s behind the first master's, so a failover
  // steps the store's clock 4 s back (and a failover back, 4 s ahead).
  const clocks = clockShims([0, -REPLICA_BEHIND_MS])
  const sentinel = await startedUnder(clocks, startRedisSentinel({ env: (node) => ({ ...clocks.shims[node]?.env }) }))
  /** A client of the master now, the one the sentinels name. */
  const admin: Admin = async () => ownClient(await sentinel.masterPort())
  /**
   * A store fault heals when the master has its replica online again (a restarted replica
   * starts empty: promoted before it synced, it would lose every record, the limit
   * docs/durability.md names: a replica that acknowledged loses the write if it fails too).
   * Answers how long it waited.
   */
  const replicaOnline = async (): Promise<number> => {
    const began = Date.now()
    for (;;) {
      const { client, done } = await admin(0).catch(() => ({ client: undefined, done: () => {} }))
      const info = await client?.info('replication').catch(() => '')
      done()
      if (/role:master/.test(info ?? '') && /slave0:.*state=online/.test(info ?? '')) return Date.now() - began
      if (Date.now() - began > 60_000) throw new Error('the replica did not come back online within 60 s')
      await sleep(100)
    }
  }
  return {
    proxiedPort: undefined,
    env: () => ({
      REDIS_SENTINELS: sentinel.sentinels.map((node) => `${node.host}:${node.port}`).join(','),
      REDIS_SENTINEL_NAME: SENTINEL_NAME,
      IDEMPOTENCY_DURABILITY_REPLICAS: '1',
      IDEMPOTENCY_DURABILITY_TIMEOUT_MS: '200',
    }),
    faults: {
      'store-pause': async ({ fault }) => {
        const master = sentinel.node(await sentinel.masterPort())
        process.kill(master.pid, 'SIGSTOP')
        await sleep(fault.durationMs)
        process.kill(master.pid, 'SIGCONT')
        return `master ${master.port}, replica online ${await replicaOnline()} ms after`
      },
      'sentinel-failover': async ({ fault, start, now }) => {
        const old = await sentinel.masterPort()
        await sentinel.node(old).stop()
        const promoted = await sentinel.failoverFrom(old)
        const detail = `master ${old} → ${promoted} after ${now() - start} ms`
        await sleep(start + fault.durationMs - now())
        await sentinel.restart(old)
        return `${detail}, replica online ${await replicaOnline()} ms after`
      },
      'replica-kill': async ({ fault }) => {
        const master = await sentinel.masterPort()
        const replica = sentinel.nodes.find((node) => node.port !== master) as { port: number }
        await sentinel.node(replica.port).stop()
        await sleep(fault.durationMs)
        await sentinel.restart(replica.port)
        return `replica ${replica.port}, online ${await replicaOnline()} ms after`
      },
      // Both nodes' clocks step together, each keeping its own offset; the master's is read.
      'clock-step': clockStep(
        () => clocks.shims,
        async () => {
          const { client, done } = await admin(0)
          return redisOffset(client).finally(done)
        },
      ),
      ...redisAdminFaults(admin, 1),
    },
    async roles() {
      const named = await sentinel.masterPort().catch(() => 0)
      const own: string[] = []
      for (const node of sentinel.nodes) {
        const client = new Redis({ port: node.port, host: '127.0.0.1', commandTimeout: 300, lazyConnect: true })
        client.on('error', () => {})
        const info = await client
          .connect()
          .then(() => client.info('replication'))
          .catch(() => 'role:down')
        client.disconnect()
        own.push(
          `${node.port} ${/role:(\w+)/.exec(info)?.[1]}${/master_link_status:(\w+)/.exec(info)?.[1] === 'down' ? ' (link down)' : ''}`,
        )
      }
      return `sentinels name ${named}; ${own.join(', ')}`
    },
    reader: async () => redisReader(await sentinel.masterPort()),
    databaseUrl: () => undefined,
    async stop() {
      await sentinel.stop()
      clocks.remove()
    },
  }
}
