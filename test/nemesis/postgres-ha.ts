/**
 * The `postgres-ha` store of the nemesis: a PostgreSQL primary and a synchronous streaming
 * standby (`pg_basebackup` from the primary, `synchronous_standby_names = '*'`), behind a router
 * that the apps' proxies connect to, so the apps follow the primary: the nemesis cuts the old
 * primary off, promotes the standby and points the router at it.
 */
import { execFileSync } from 'node:child_process'
import { chownSync, mkdtempSync, rmSync } from 'node:fs'
import { connect, createServer, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { type PostgresServer, postgresBinDir, startPostgresServer } from '../../scripts/postgres-server.js'

/** A TCP forwarder whose target can change: every connection is reset when it does. */
export interface Router {
  readonly port: number
  /** Points new connections at `port` (undefined: refuse them), resetting the open ones. */
  retarget(port: number | undefined): void
  close(): Promise<void>
}

export async function startRouter(initial: number): Promise<Router> {
  let target: number | undefined = initial
  const open = new Set<Socket>()
  const server: Server = createServer((client) => {
    if (target === undefined) {
      client.resetAndDestroy()
      return
    }
    const upstream = connect({ port: target, host: '127.0.0.1' })
    open.add(client)
    open.add(upstream)
    client.pipe(upstream)
    upstream.pipe(client)
    const end = () => {
      open.delete(client)
      open.delete(upstream)
      client.destroy()
      upstream.destroy()
    }
    for (const socket of [client, upstream]) {
      socket.on('error', end)
      socket.on('close', end)
    }
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()))
  const address = server.address()
  return {
    port: typeof address === 'object' && address !== null ? address.port : 0,
    retarget(port) {
      target = port
      for (const socket of [...open]) socket.destroy()
      open.clear()
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of open) socket.destroy()
        server.close(() => resolve())
      }),
  }
}

export interface PostgresHa {
  /** What the apps' proxies connect to: the router, in front of the primary now. */
  readonly port: number
  /** The primary now (the standby once promoted). */
  primaryUrl(): string
  /** True once the standby was promoted (there is no standby from then on). */
  promoted(): boolean
  /**
   * Cuts the old primary off (the router refuses connections and the primary is SIGSTOPped),
   * promotes the standby, points the router at it and kills the old primary. Answers how long
   * the apps had no primary, ms.
   */
  promote(): Promise<number>
  stop(): Promise<void>
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

function postgresUser(): { uid?: number; gid?: number } {
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return {}
  return {
    uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim()),
    gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim()),
  }
}

async function query<T extends pg.QueryResultRow>(url: string, text: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 })
  client.on('error', () => {})
  try {
    await client.connect()
    return (await client.query<T>(text)).rows
  } finally {
    await client.end().catch(() => undefined)
  }
}

export interface PostgresHaOptions {
  /** The environment of the primary (0) and of the standby (1) on top of this process's (a clock shim's). */
  readonly env?: (node: 0 | 1) => Record<string, string>
}

export async function startPostgresHa(options: PostgresHaOptions = {}): Promise<PostgresHa> {
  const env = (node: 0 | 1) => (options.env === undefined ? {} : { env: options.env(node) })
  const primary = await startPostgresServer({ config: { wal_level: 'replica', max_wal_senders: '5' }, ...env(0) })
  const owner = postgresUser()
  const standbyDir = mkdtempSync(join(tmpdir(), 'idemkit-postgres-standby-'))
  if (owner.uid !== undefined) chownSync(standbyDir, owner.uid, owner.gid as number)
  let standby: PostgresServer | undefined
  let router: Router | undefined
  try {
    execFileSync(
      join(postgresBinDir(), 'pg_basebackup'),
      [
        '-D',
        join(standbyDir, 'data'),
        '-h',
        '127.0.0.1',
        '-p',
        String(primary.port),
        '-U',
        'postgres',
        '-R',
        '-X',
        'stream',
      ],
      { stdio: 'pipe', ...owner },
    )
    standby = await startPostgresServer({ dir: standbyDir, ...env(1) })
    // Synchronous from now on: a commit returns once the standby has flushed it.
    await query(primary.url, "ALTER SYSTEM SET synchronous_standby_names = '*'")
    await query(primary.url, 'SELECT pg_reload_conf()')
    const deadline = Date.now() + 20_000
    while (
      (
        await query<{ n: number }>(
          primary.url,
          "SELECT count(*)::int AS n FROM pg_stat_replication WHERE sync_state = 'sync'",
        )
      )[0]?.n !== 1
    ) {
      if (Date.now() > deadline) throw new Error('the standby did not become synchronous within 20 s')
      await sleep(100)
    }
    router = await startRouter(primary.port)
  } catch (error) {
    await standby?.stop()
    await primary.stop()
    rmSync(standbyDir, { recursive: true, force: true })
    throw error
  }
  const routed = router
  const second = standby
  let current: PostgresServer = primary
  let old: PostgresServer | undefined
  return {
    port: routed.port,
    primaryUrl: () => current.url,
    promoted: () => current !== primary,
    async promote() {
      if (current !== primary) throw new Error('already promoted')
      const began = Date.now()
      routed.retarget(undefined)
      process.kill(primary.pid, 'SIGSTOP')
      await query(second.url, 'SELECT pg_promote(true, 30)')
      while ((await query<{ r: boolean }>(second.url, 'SELECT pg_is_in_recovery() AS r'))[0]?.r !== false)
        await sleep(50)
      routed.retarget(second.port)
      const gap = Date.now() - began
      old = primary
      current = second
      // The old primary never comes back: SIGKILL (continued first, so it can die).
      process.kill(primary.pid, 'SIGCONT')
      process.kill(primary.pid, 'SIGKILL')
      return gap
    },
    async stop() {
      await routed.close()
      await second.stop()
      await (old ?? primary).stop().catch(() => undefined)
      rmSync(standbyDir, { recursive: true, force: true })
    },
  }
}
