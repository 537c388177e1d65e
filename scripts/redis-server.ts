/**
 * Starts and stops a throwaway `redis-server` on a free loopback port, for the tests, the
 * benchmarks and the examples. Nothing is kept on disk unless `appendonly` is asked for.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { connect, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface RedisServerOptions {
  /** Port to listen on; a free one is picked when omitted. */
  port?: number
  /** Extra `--name value` arguments, e.g. `{ appendonly: 'yes' }`. */
  config?: Record<string, string>
  /** Directory for the server's files; a fresh temporary one when omitted. */
  dir?: string
  /** Environment variables the server gets on top of this process's (an `LD_PRELOAD` shim's). */
  env?: Record<string, string>
}

export interface RedisServer {
  readonly port: number
  readonly url: string
  readonly pid: number
  readonly dir: string
  readonly process: ChildProcess
  /** Stops the server (SIGKILL unless `graceful`) and waits for it to exit. */
  stop(options?: { graceful?: boolean; keepDir?: boolean }): Promise<void>
}

/** Throws a clear error when `redis-server` is not installed. */
export function assertRedisServerInstalled(): void {
  try {
    execFileSync('redis-server', ['--version'], { stdio: 'pipe' })
  } catch (error) {
    throw new Error(
      'redis-server is not installed or not on PATH. The tests start their own throwaway ' +
        'redis-server on a free 127.0.0.1 port; install it first (Debian: apt-get install -y redis-server).',
      { cause: error },
    )
  }
}

/** Asks the OS for a free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

/** Starts a redis-server and resolves once it accepts connections. */
export async function startRedisServer(options: RedisServerOptions = {}): Promise<RedisServer> {
  assertRedisServerInstalled()
  const port = options.port ?? (await freePort())
  const ownDir = options.dir === undefined
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), 'idemkit-redis-'))
  const config: Record<string, string> = {
    bind: '127.0.0.1',
    port: String(port),
    save: '',
    appendonly: 'no',
    dir,
    'protected-mode': 'no',
    ...options.config,
  }
  const args = Object.entries(config).flatMap(([name, value]) => [`--${name}`, value])
  const child = spawn('redis-server', args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: options.env === undefined ? process.env : { ...process.env, ...options.env },
  })
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => {
    if (output.length < 8192) output += chunk.toString()
  })
  child.stderr?.on('data', (chunk: Buffer) => {
    if (output.length < 8192) output += chunk.toString()
  })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  await waitForPort(port, child, () => output)
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    pid: child.pid ?? 0,
    dir,
    process: child,
    async stop({ graceful = false, keepDir = false } = {}) {
      if (child.exitCode === null && child.signalCode === null) {
        // A paused server ignores SIGTERM until it is continued.
        child.kill('SIGCONT')
        child.kill(graceful ? 'SIGTERM' : 'SIGKILL')
        await exited
      }
      if (ownDir && !keepDir) rmSync(dir, { recursive: true, force: true })
    },
  }
}

async function waitForPort(port: number, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + 10_000
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      throw new Error(`redis-server exited with code ${child.exitCode}: ${output()}`)
    }
    if (await canConnect(port)) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  child.kill('SIGKILL')
  throw new Error(`redis-server did not accept connections on port ${port} within 10 s: ${output()}`)
}

/**
 * Calls of each command the server has served since it started or since CONFIG RESETSTAT, by
 * name (INFO commandstats): what the tests and the bench count round trips with.
 */
export async function commandCalls(redis: { info(section: string): Promise<string> }): Promise<Record<string, number>> {
  const info = await redis.info('commandstats')
  const calls: Record<string, number> = {}
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[match[1] as string] = Number(match[2])
  return calls
}

/** True when something accepts a TCP connection on 127.0.0.1:`port` now. */
export function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1' })
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}
