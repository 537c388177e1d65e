/**
 * A redis-server child for one fault test: standalone, with or without AOF, that the test can
 * pause (SIGSTOP/SIGCONT), kill and restart on the same port and directory, all by PID.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis, type RedisOptions } from 'ioredis'
import { freePort, type RedisServer, startRedisServer } from '../../scripts/redis-server.js'

export interface FaultRedisOptions {
  /** Append-only file with `appendfsync everysec`. */
  readonly aof?: boolean
  /** Extra `redis-server` settings, e.g. `{ 'maxmemory-policy': 'allkeys-lru' }`. */
  readonly config?: Record<string, string>
  /** The server's environment on top of this process's (a clock shim's `LD_PRELOAD`), kept across restarts. */
  readonly env?: Record<string, string>
}

export interface FaultRedis {
  readonly port: number
  readonly url: string
  /** The PID of the server now running (a new one after each restart). */
  pid(): number
  /** A client for the test itself (not the system under test), closed by `stop()`. */
  admin(): Redis
  /** SIGSTOP: the server stops reading and answering; connections stay open. */
  pause(): void
  /** SIGCONT. */
  resume(): void
  /** SIGKILL, and waits for the exit. */
  kill(): Promise<void>
  /** Starts the server again on the same port and directory (AOF and data files kept). */
  restart(options?: FaultRedisOptions): Promise<void>
  /** INFO fields of one section. */
  info(section: string): Promise<Record<string, string>>
  stop(): Promise<void>
}

function settings(options: FaultRedisOptions): Record<string, string> {
  const aof: Record<string, string> =
    options.aof === true ? { appendonly: 'yes', appendfsync: 'everysec' } : { appendonly: 'no' }
  return { 'maxmemory-policy': 'noeviction', ...aof, ...options.config }
}

/** Starts a standalone redis-server on a free 127.0.0.1 port. */
export async function startFaultRedis(options: FaultRedisOptions = {}): Promise<FaultRedis> {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-fault-redis-'))
  const env = options.env
  let server: RedisServer = await startRedisServer({ port, dir, config: settings(options), ...(env ? { env } : {}) })
  const admins: Redis[] = []
  const adminOptions: RedisOptions = { commandTimeout: 5_000, maxRetriesPerRequest: 2, lazyConnect: false }

  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    pid: () => server.pid,
    admin() {
      const client = new Redis(port, '127.0.0.1', adminOptions)
      client.on('error', () => {})
      admins.push(client)
      return client
    },
    pause() {
      process.kill(server.pid, 'SIGSTOP')
    },
    resume() {
      process.kill(server.pid, 'SIGCONT')
    },
    async kill() {
      await server.stop({ keepDir: true })
    },
    async restart(next = options) {
      await server.stop({ keepDir: true })
      server = await startRedisServer({ port, dir, config: settings(next), ...(env ? { env } : {}) })
    },
    async info(section) {
      const client = new Redis(port, '127.0.0.1', { ...adminOptions, lazyConnect: true })
      client.on('error', () => {})
      try {
        await client.connect()
        const text = await client.info(section)
        return Object.fromEntries(
          text
            .split(/\r?\n/)
            .filter((line) => line.includes(':') && !line.startsWith('#'))
            .map((line) => [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 1)]),
        )
      } finally {
        client.disconnect()
      }
    },
    async stop() {
      for (const client of admins) client.disconnect()
      await server.stop({ keepDir: true })
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
