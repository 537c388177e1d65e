/**
 * What the bench scripts (run.ts, profile.ts, calibrate.ts) share: building the package the
 * servers under test load, starting a server.ts process, and reading redis-server's CPU time;
 * the `--name value` options of the studies (lean-complete.ts, functions-study.ts, ...) and the
 * median of their rounds.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import type { Redis } from 'ioredis'

/**
 * The value after `name` (e.g. `--rounds`) among the script's arguments, or `fallback` when
 * `name` is not among them.
 */
export function option<T extends string | undefined>(
  name: string,
  fallback: T,
  args: readonly string[] = process.argv.slice(2),
): string | T {
  return args.includes(name) ? (args[args.indexOf(name) + 1] as string) : fallback
}

/** The median of `values` (the mean of the middle two for an even count). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2
    ? (sorted[middle] as number)
    : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2
}

/** True when dist/ is newer than every source file it is built from. */
function builtIsFresh(): boolean {
  const marker = 'dist/plugins/express/index.js'
  if (!existsSync(marker)) return false
  const builtAt = statSync(marker).mtimeMs
  const newest = (dir: string): number =>
    readdirSync(dir, { withFileTypes: true }).reduce((latest, entry) => {
      const path = join(dir, entry.name)
      return Math.max(latest, entry.isDirectory() ? newest(path) : statSync(path).mtimeMs)
    }, 0)
  return Math.max(newest('src'), newest('plugins')) < builtAt
}

/**
 * The servers under test load the compiled package (`dist/`), as users run it: runs
 * `npm run build` unless dist/ is newer than every source file.
 */
export function ensureBuilt(): void {
  if (!builtIsFresh()) execFileSync('npm', ['run', 'build'], { stdio: 'ignore' })
}

/** A server.ts process that is listening. */
export interface BenchServer {
  readonly url: string
  readonly child: ChildProcess
}

/**
 * Starts scripts/bench/server.ts with `env` (FRAMEWORK, MODE, ...) on a free port and waits for
 * the line that tells the port.
 * @param nodeArgs extra Node.js flags, e.g. `--cpu-prof`.
 */
export async function startBenchServer(
  env: Record<string, string>,
  nodeArgs: readonly string[] = [],
): Promise<BenchServer> {
  const child = spawn(process.execPath, [...nodeArgs, '--import', 'tsx', 'scripts/bench/server.ts'], {
    env: { ...process.env, ...env, PORT: '0', NODE_ENV: 'production' },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const port = await new Promise<number>((resolve, reject) => {
    let output = ''
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString()
      const match = /listening (\d+)/.exec(output)
      if (match) resolve(Number(match[1]))
    })
    child.once('exit', (code) => reject(new Error(`${JSON.stringify(env)} exited with ${code}: ${output}`)))
  })
  return { url: `http://127.0.0.1:${port}`, child }
}

/** redis-server's CPU time so far (user + system, all threads), in microseconds. */
export async function redisCpuUs(redis: Redis): Promise<number> {
  const info = await redis.info('cpu')
  const read = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? 0) * 1e6
  return read('used_cpu_user') + read('used_cpu_sys')
}

/** Clock ticks per second of /proc's CPU times (`getconf CLK_TCK`; 100 on Linux as built). */
const TICKS_PER_S = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100
  } catch {
    return 100
  }
})()

/**
 * CPU time so far (utime + stime, every thread) of process `pid`, read from /proc/<pid>/stat, in
 * microseconds: read from outside, so reading it costs the process nothing. Linux only; a tick
 * is usually 10 ms, fine over a run of thousands of requests.
 */
export function processCpuUs(pid: number): number {
  const fields = statFields(readFileSync(`/proc/${pid}/stat`, 'utf8'))
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / TICKS_PER_S
}

/**
 * The fields of a /proc/<pid>/stat line after the command name (which may hold spaces): state
 * (the 3rd field) first, so ppid is [1], utime [11], stime [12], cutime [13], cstime [14].
 */
function statFields(stat: string): string[] {
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')
}

/**
 * CPU time so far (user + system) of a PostgreSQL server: the postmaster and every process it
 * started (the backends serving the pools among them), read from /proc, in microseconds.
 * Linux only; the clock-tick resolution (usually 10 ms) is fine over a run of thousands of requests.
 */
export function postgresCpuUs(postmasterPid: number): number {
  const TICK_US = 1e6 / TICKS_PER_S
  let ticks = 0
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    let stat: string
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
    } catch {
      continue
    }
    const fields = statFields(stat)
    if (Number(entry) === postmasterPid) {
      // utime, stime, and cutime, cstime: the backends that exited (the postmaster reaped them),
      // so a backend that ends between two readings keeps its CPU in the second.
      ticks += Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])
    } else if (Number(fields[1]) === postmasterPid) {
      ticks += Number(fields[11]) + Number(fields[12])
    }
  }
  return ticks * TICK_US
}
