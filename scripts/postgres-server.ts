/**
 * Starts and stops a throwaway PostgreSQL cluster on a free loopback port, for the tests, the
 * benchmarks and the examples: `initdb` into a fresh temporary directory, then `postgres` in the
 * foreground as a child process (so its PID is known and it is stopped by PID), with
 * `fsync=off` (nothing here needs to survive a power cut; a killed server keeps what it
 * committed). It never touches a server already
 * running on the machine. When the process runs as root, both run as the `postgres` user
 * (`initdb` refuses root).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from './redis-server.js'

export interface PostgresServerOptions {
  /** Port to listen on; a free one is picked when omitted. */
  port?: number
  /** The cluster's directory; a fresh one (initdb) when omitted. An existing one is reused. */
  dir?: string
  /** Extra `-c name=value` settings. */
  config?: Record<string, string>
  /** Environment variables the server gets on top of this process's (an `LD_PRELOAD` shim's). */
  env?: Record<string, string>
}

export interface PostgresServer {
  readonly port: number
  /** `postgres://postgres@127.0.0.1:<port>/postgres` */
  readonly url: string
  readonly pid: number
  readonly dir: string
  /** SIGQUIT (PostgreSQL's immediate shutdown, as `pg_ctl stop -m immediate`) and waits for the exit. */
  stop(options?: { keepDir?: boolean }): Promise<void>
}

/** The directory of PostgreSQL's server binaries (initdb, postgres): on PATH or Debian's. */
export function postgresBinDir(): string {
  for (const candidate of ['/usr/lib/postgresql']) {
    if (!existsSync(candidate)) continue
    const versions = readdirSync(candidate)
      .filter((name) => /^\d+$/.test(name) && existsSync(join(candidate, name, 'bin', 'postgres')))
      .sort((a, b) => Number(b) - Number(a))
    if (versions[0] !== undefined) return join(candidate, versions[0], 'bin')
  }
  try {
    const initdb = execFileSync('sh', ['-c', 'command -v initdb'], { encoding: 'utf8' }).trim()
    if (initdb !== '') return initdb.slice(0, initdb.lastIndexOf('/'))
  } catch {
    // not on PATH either
  }
  throw new Error(
    'PostgreSQL server binaries (initdb, postgres) were not found. The tests start their own ' +
      'throwaway cluster on a free 127.0.0.1 port; install them first (Debian: apt-get install -y postgresql).',
  )
}

/** uid and gid to run PostgreSQL as: the `postgres` user when this process is root. */
function runAs(): { uid?: number; gid?: number } {
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return {}
  const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim())
  const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim())
  return { uid, gid }
}

/** Starts a PostgreSQL cluster and resolves once it accepts queries. */
export async function startPostgresServer(options: PostgresServerOptions = {}): Promise<PostgresServer> {
  const bin = postgresBinDir()
  const port = options.port ?? (await freePort())
  const owner = runAs()
  const ownDir = options.dir === undefined
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), 'idemkit-postgres-'))
  const data = join(dir, 'data')
  if (owner.uid !== undefined) chownSync(dir, owner.uid, owner.gid as number)
  if (!existsSync(join(data, 'PG_VERSION'))) {
    execFileSync(join(bin, 'initdb'), ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8'], {
      stdio: 'pipe',
      ...owner,
    })
  }
  const settings: Record<string, string> = {
    listen_addresses: '127.0.0.1',
    unix_socket_directories: dir,
    // Commits still write their WAL to the kernel (synchronous_commit stays on), so a killed
    // server keeps every committed record; only a power cut could lose them.
    fsync: 'off',
    max_connections: '200',
    ...options.config,
  }
  const args = [
    '-D',
    data,
    '-p',
    String(port),
    ...Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
  ]
  const child = spawn(join(bin, 'postgres'), args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    ...owner,
    env: options.env === undefined ? process.env : { ...process.env, ...options.env },
  })
  let output = ''
  const keep = (chunk: Buffer) => {
    if (output.length < 16_384) output += chunk.toString()
  }
  child.stdout?.on('data', keep)
  child.stderr?.on('data', keep)
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`
  await waitForQueries(url, child, () => output)
  return {
    port,
    url,
    pid: child.pid ?? 0,
    dir,
    async stop({ keepDir = false } = {}) {
      await stopChild(child, exited)
      if (ownDir && !keepDir) rmSync(dir, { recursive: true, force: true })
    },
  }
}

async function stopChild(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  // A paused server ignores signals until it is continued.
  child.kill('SIGCONT')
  child.kill('SIGQUIT')
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000)
  await exited
  clearTimeout(timer)
}

async function waitForQueries(url: string, child: ChildProcess, output: () => string): Promise<void> {
  const { default: pg } = await import('pg')
  const deadline = Date.now() + 20_000
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`postgres exited with code ${child.exitCode}: ${output()}`)
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 })
    try {
      await client.connect()
      await client.query('SELECT 1')
      return
    } catch {
      // not up yet
    } finally {
      await client.end().catch(() => undefined)
    }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  child.kill('SIGKILL')
  throw new Error(`postgres did not accept queries within 20 s: ${output()}`)
}
