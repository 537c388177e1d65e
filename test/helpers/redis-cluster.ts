/**
 * A local Redis Cluster of three masters (no replicas) on 127.0.0.1: each node a redis-server
 * child started here and stopped by PID, joined with `redis-cli --cluster create`.
 */
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Redis } from 'ioredis'
import { freePort, type RedisServer, startRedisServer } from '../../scripts/redis-server.js'
import { sleep } from './sleep.js'

const run = promisify(execFile)

export interface RedisCluster {
  readonly nodes: readonly { readonly port: number; readonly pid: number; readonly id: string }[]
  /** `127.0.0.1:<port>` of every master, comma-separated (the test app's REDIS_CLUSTER). */
  readonly startupNodes: string
  /** Moves `slots` slots, with their keys, from one master to another (`redis-cli --cluster reshard`). */
  reshard(from: number, to: number, slots: number): Promise<void>
  stop(): Promise<void>
}

/** True when `port` can be bound on 127.0.0.1 right now. */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer()
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}

/** A free port whose cluster bus port (port + 10000) is free too. */
async function clusterPort(taken: Set<number>): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = await freePort()
    if (port > 55_000 || taken.has(port) || taken.has(port + 10_000)) continue
    if (await portFree(port + 10_000)) return port
  }
  throw new Error('no free port pair (port, port + 10000) for a cluster node')
}

export interface RedisClusterOptions {
  /** Each master's environment (0, 1, 2) on top of this process's (a clock shim's `LD_PRELOAD`). */
  readonly env?: (node: number) => Record<string, string>
}

/** Starts three cluster-enabled masters and creates the cluster. */
export async function startRedisCluster(options: RedisClusterOptions = {}): Promise<RedisCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-cluster-'))
  const servers: RedisServer[] = []
  const taken = new Set<number>()
  try {
    for (let i = 0; i < 3; i++) {
      const port = await clusterPort(taken)
      taken.add(port)
      taken.add(port + 10_000)
      const nodeDir = join(dir, String(port))
      servers.push(
        await startRedisServer({
          port,
          dir: mkdtempSync(`${nodeDir}-`),
          config: {
            'cluster-enabled': 'yes',
            'cluster-config-file': 'nodes.conf',
            'cluster-node-timeout': '5000',
            'maxmemory-policy': 'noeviction',
          },
          ...(options.env === undefined ? {} : { env: options.env(i) }),
        }),
      )
    }
    const addresses = servers.map((server) => `127.0.0.1:${server.port}`)
    await run('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes'], {
      timeout: 30_000,
    })
    const ids: string[] = []
    for (const server of servers) {
      const client = new Redis(server.port, '127.0.0.1', { commandTimeout: 2_000 })
      try {
        ids.push(String(await client.call('CLUSTER', 'MYID')))
        const deadline = Date.now() + 20_000
        for (;;) {
          const info = String(await client.call('CLUSTER', 'INFO'))
          if (info.includes('cluster_state:ok')) break
          if (Date.now() > deadline) throw new Error(`cluster node ${server.port} not ok: ${info}`)
          await sleep(100)
        }
      } finally {
        client.disconnect()
      }
    }
    return {
      nodes: servers.map((server, i) => ({ port: server.port, pid: server.pid, id: ids[i] as string })),
      startupNodes: addresses.join(','),
      async reshard(from, to, slots) {
        await run(
          'redis-cli',
          [
            '--cluster',
            'reshard',
            addresses[from] as string,
            '--cluster-from',
            ids[from] as string,
            '--cluster-to',
            ids[to] as string,
            '--cluster-slots',
            String(slots),
            '--cluster-yes',
          ],
          { timeout: 120_000, maxBuffer: 64 * 1024 * 1024 },
        )
      },
      async stop() {
        await Promise.all(servers.map((server) => server.stop()))
        rmSync(dir, { recursive: true, force: true })
      },
    }
  } catch (error) {
    await Promise.all(servers.map((server) => server.stop()))
    rmSync(dir, { recursive: true, force: true })
    throw error
  }
}
