/**
 * A Redis master, one replica and three sentinels (quorum 2) on 127.0.0.1, each a child
 * process started here and stopped by PID: what a Sentinel deployment looks like, small enough
 * for a test that kills the master and waits for the sentinels to promote the replica.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import { canConnect, freePort, type RedisServer, startRedisServer } from '../../scripts/redis-server.js'
import { sleep } from './sleep.js'

export const SENTINEL_NAME = 'idemkit'

export interface RedisSentinelSetup {
  /** The master and the replica as started (the roles swap after a failover). */
  readonly nodes: readonly RedisServer[]
  readonly sentinels: readonly { readonly host: string; readonly port: number }[]
  /** The port of the server the sentinels name as master now. */
  masterPort(): Promise<number>
  /**
   * Waits until the failover from `port` has ended: every sentinel names the same other master
   * and that server answers `role:master`; resolves to its port. One sentinel's answer is not
   * enough: a sentinel names the promoted replica while the failover can still be aborted, and
   * a master restarted empty then could be made the master again.
   */
  failoverFrom(port: number, timeoutMs?: number): Promise<number>
  /** The server on `port`. */
  node(port: number): RedisServer
  /** Starts the server that was on `port` again, as a replica of the current master. */
  restart(port: number): Promise<void>
  /**
   * Sets every sentinel's `down-after-milliseconds` to `ms`: after the failover a test made, a
   * master slowed by a loaded machine (the full resync of the restarted node) is then not failed
   * over again, to a node that may not have synced yet.
   */
  holdFailovers(ms: number): Promise<void>
  stop(): Promise<void>
}

/** The sentinel binary: Debian's `redis-sentinel`, or `redis-server --sentinel`. */
function sentinelCommand(): { command: string; args: readonly string[] } {
  try {
    execFileSync('redis-sentinel', ['--version'], { stdio: 'pipe' })
    return { command: 'redis-sentinel', args: [] }
  } catch {
    return { command: 'redis-server', args: ['--sentinel'] }
  }
}

async function startSentinel(masterPort: number, dir: string): Promise<{ port: number; child: ChildProcess }> {
  const port = await freePort()
  const file = join(dir, `sentinel-${port}.conf`)
  writeFileSync(
    file,
    [
      `port ${port}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${SENTINEL_NAME} 127.0.0.1 ${masterPort} 2`,
      `sentinel down-after-milliseconds ${SENTINEL_NAME} 1000`,
      `sentinel failover-timeout ${SENTINEL_NAME} 10000`,
      `sentinel parallel-syncs ${SENTINEL_NAME} 1`,
      '',
    ].join('\n'),
  )
  const { command, args } = sentinelCommand()
  const child = spawn(command, [file, ...args], { stdio: 'ignore' })
  const deadline = Date.now() + 10_000
  while (!(await canConnect(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL')
      throw new Error(`${command} did not start on port ${port}`)
    }
    await sleep(20)
  }
  return { port, child }
}

export interface RedisSentinelOptions {
  /**
   * The environment of the first master (0) and of its replica (1) on top of this process's (a
   * clock shim's `LD_PRELOAD`), each kept by its server across restarts; the sentinels get none.
   */
  readonly env?: (node: 0 | 1) => Record<string, string>
}

/** Starts the master, its replica (in sync) and three sentinels that see both. */
export async function startRedisSentinel(options: RedisSentinelOptions = {}): Promise<RedisSentinelSetup> {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-sentinel-'))
  const config = { 'maxmemory-policy': 'noeviction' }
  const env = (node: 0 | 1) => (options.env === undefined ? {} : { env: options.env(node) })
  const master = await startRedisServer({ config, ...env(0) })
  const replica = await startRedisServer({
    config: { ...config, replicaof: `127.0.0.1 ${master.port}` },
    ...env(1),
  })
  const envByPort = new Map([
    [master.port, env(0)],
    [replica.port, env(1)],
  ])
  const nodes = new Map<number, RedisServer>([
    [master.port, master],
    [replica.port, replica],
  ])
  const children: ChildProcess[] = []
  const sentinels: { host: string; port: number }[] = []
  const clients: Redis[] = []
  const setup: RedisSentinelSetup = {
    get nodes() {
      return [...nodes.values()]
    },
    sentinels,
    async masterPort() {
      for (const client of clients) {
        try {
          const [, port] = (await client.call('SENTINEL', 'get-master-addr-by-name', SENTINEL_NAME)) as string[]
          return Number(port)
        } catch {
          // Ask the next sentinel.
        }
      }
      throw new Error('no sentinel answered')
    },
    async failoverFrom(port, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const named = await Promise.all(
          clients.map((client) =>
            (client.call('SENTINEL', 'get-master-addr-by-name', SENTINEL_NAME) as Promise<string[]>).then(
              ([, answered]) => Number(answered),
              () => port,
            ),
          ),
        )
        const now = named[0] as number
        if (now !== port && named.every((p) => p === now) && (await roleOf(now)) === 'master') return now
        if (Date.now() > deadline)
          throw new Error(`no failover from ${port} within ${timeoutMs} ms (sentinels name ${named})`)
        await sleep(50)
      }
    },
    node(port) {
      const node = nodes.get(port)
      if (node === undefined) throw new Error(`no node on ${port}`)
      return node
    },
    async restart(port) {
      const current = await setup.masterPort()
      if (current === port)
        throw new Error(`the sentinels still name ${port} as master: restarting it empty would lose the data`)
      nodes.set(
        port,
        await startRedisServer({
          port,
          config: { ...config, replicaof: `127.0.0.1 ${current}` },
          ...envByPort.get(port),
        }),
      )
      // The master the sentinels name at each look: should they fail over again meanwhile (a
      // master slowed by the full resync on a loaded machine), the wait follows the new one.
      await waitForSync(() => setup.masterPort())
    },
    async holdFailovers(ms) {
      for (const client of clients)
        await client.call('SENTINEL', 'SET', SENTINEL_NAME, 'down-after-milliseconds', String(ms))
    },
    async stop() {
      for (const client of clients) client.disconnect()
      for (const child of children) {
        if (child.exitCode === null && child.signalCode === null) {
          const exited = new Promise((resolve) => child.once('exit', resolve))
          child.kill('SIGKILL')
          await exited
        }
      }
      for (const node of nodes.values()) await node.stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
  try {
    await waitForSync(async () => master.port)
    for (let i = 0; i < 3; i++) {
      const { port, child } = await startSentinel(master.port, dir)
      children.push(child)
      sentinels.push({ host: '127.0.0.1', port })
      const client = new Redis({ port, host: '127.0.0.1', lazyConnect: false, maxRetriesPerRequest: 1 })
      client.on('error', () => undefined)
      clients.push(client)
    }
    await waitForSentinels(clients)
  } catch (error) {
    await setup.stop()
    throw error
  }
  return setup
}

/** The role a server reports (`master`, `slave`), or `unreachable`. */
async function roleOf(port: number): Promise<string> {
  const client = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    commandTimeout: 2_000,
  })
  client.on('error', () => undefined)
  try {
    await client.connect()
    return /role:(\w+)/.exec(await client.info('replication'))?.[1] ?? 'unknown'
  } catch {
    return 'unreachable'
  } finally {
    client.disconnect()
  }
}

/**
 * Waits until the master (`masterPort()`, asked again at each look) reports its replica online. A
 * node restarted as a replica after a fault test makes a full resync of what the test wrote
 * (tens of MB): 30 s bounds it.
 */
async function waitForSync(masterPort: () => Promise<number>): Promise<void> {
  const deadline = Date.now() + 30_000
  for (;;) {
    const port = await masterPort()
    const admin = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1 })
    admin.on('error', () => undefined)
    const replication = await admin
      .connect()
      .then(() => admin.info('replication'))
      .catch((error: unknown) => `unreachable: ${String(error)}`)
      .finally(() => admin.disconnect())
    if (/slave0:.*state=online/.test(replication)) return
    if (Date.now() > deadline) {
      throw new Error(
        `the replica did not sync within 30 s; the master (${port}) reports: ${replication.replace(/\r?\n/g, ' ')}`,
      )
    }
    await sleep(50)
  }
}

/** Waits until every sentinel knows the replica and the two other sentinels. */
async function waitForSentinels(clients: readonly Redis[]): Promise<void> {
  const deadline = Date.now() + 15_000
  for (const client of clients) {
    for (;;) {
      const master = (await client.call('SENTINEL', 'master', SENTINEL_NAME)) as string[]
      const field = (name: string) => Number(master[master.indexOf(name) + 1])
      if (field('num-slaves') >= 1 && field('num-other-sentinels') >= 2) break
      if (Date.now() > deadline) throw new Error('the sentinels did not find each other within 15 s')
      await sleep(100)
    }
  }
}
