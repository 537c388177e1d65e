/**
 * A Redis master and one replica of it, each a redis-server child of the test (stopped by PID),
 * the replica in sync when this resolves; and a client for the store under test on the master,
 * as the examples set it up.
 */
import { Redis } from 'ioredis'
import { type RedisServer, startRedisServer } from '../../scripts/redis-server.js'
import { sleep } from './sleep.js'

/** Starts a replica of `masterPort` and waits until the master counts it online. */
export async function startReplicaOf(masterPort: number, admin: Redis): Promise<RedisServer> {
  const replica = await startRedisServer({
    config: { 'maxmemory-policy': 'noeviction', replicaof: `127.0.0.1 ${masterPort}` },
  })
  for (let i = 0; i < 100; i++) {
    const info = await admin.info('replication')
    if (/connected_slaves:1/.test(info) && /state=online/.test(info)) break
    await sleep(100)
  }
  return replica
}

/** A ready client on the master: bounded calls, one retry, no re-send after a reconnect. */
export async function storeClient(port: number): Promise<Redis> {
  const client = new Redis(port, '127.0.0.1', {
    commandTimeout: 2_000,
    maxRetriesPerRequest: 1,
    autoResendUnfulfilledCommands: false,
  })
  client.on('error', () => undefined)
  await new Promise<void>((resolve) => client.once('ready', () => resolve()))
  return client
}
