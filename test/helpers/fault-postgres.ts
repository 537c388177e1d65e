/**
 * A PostgreSQL cluster of a fault test's own, which the test can stop (immediate shutdown, as
 * `pg_ctl stop -m immediate`), restart on the same port and data, pause and resume, plus an admin
 * session for what the faults do inside the database (row locks, `pg_terminate_backend`).
 */
import { readdirSync, readFileSync, rmSync } from 'node:fs'
import pg from 'pg'
import { type PostgresServer, startPostgresServer } from '../../scripts/postgres-server.js'

export interface FaultPostgres {
  readonly url: string
  readonly port: number
  /** The running postmaster's PID. */
  pid(): number
  /** Immediate shutdown (SIGQUIT): no checkpoint, connections dropped at once. */
  stopImmediate(): Promise<void>
  /** Starts it again on the same port and data directory. */
  restart(): Promise<void>
  /** SIGSTOP / SIGCONT of the postmaster and every backend. */
  pause(): void
  resume(): void
  /** A session of its own (not through the app's pool). */
  admin(): Promise<pg.Client>
  stop(): Promise<void>
}

export interface FaultPostgresOptions {
  /** The server's environment on top of this process's (a clock shim's `LD_PRELOAD`), kept across restarts. */
  readonly env?: Record<string, string>
}

export async function startFaultPostgres(options: FaultPostgresOptions = {}): Promise<FaultPostgres> {
  const env = options.env === undefined ? {} : { env: options.env }
  let server: PostgresServer = await startPostgresServer(env)
  const { port, dir } = server
  const admins: pg.Client[] = []
  let paused: number[] = []
  const backends = (): number[] => {
    // Every process whose parent is the postmaster, from /proc (the backends, the checkpointer, ...).
    const children: number[] = []
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
        if (ppid === server.pid) children.push(Number(entry))
      } catch {
        // gone meanwhile
      }
    }
    return children
  }
  const resume = () => {
    for (const pid of paused) {
      try {
        process.kill(pid, 'SIGCONT')
      } catch {
        // exited meanwhile
      }
    }
    paused = []
  }
  return {
    url: server.url,
    port,
    pid: () => server.pid,
    async stopImmediate() {
      await server.stop({ keepDir: true })
    },
    async restart() {
      server = await startPostgresServer({ port, dir, ...env })
    },
    pause() {
      paused = []
      for (const pid of [server.pid, ...backends()]) {
        try {
          process.kill(pid, 'SIGSTOP')
          paused.push(pid)
        } catch (error) {
          // A backend that exited since it was listed (its session ended) has nothing to pause.
          if ((error as NodeJS.ErrnoException).code !== 'ESRCH' || pid === server.pid) throw error
        }
      }
    },
    resume,
    async admin() {
      const client = new pg.Client({ connectionString: server.url })
      client.on('error', () => undefined)
      await client.connect()
      admins.push(client)
      return client
    },
    async stop() {
      for (const client of admins) await client.end().catch(() => undefined)
      resume()
      await server.stop({ keepDir: true })
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
