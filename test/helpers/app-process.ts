/**
 * Runs an example app in its own process on a free loopback port, stopped by PID.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { freePort } from '../../scripts/redis-server.js'
import { sleep } from './sleep.js'

export interface AppProcess {
  readonly url: string
  readonly pid: number
  readonly child: ChildProcess
  output(): string
  stop(signal?: NodeJS.Signals): Promise<void>
}

/** Starts `script` (a TypeScript file) with `env` and resolves once it listens. */
export async function startAppProcess(script: string, env: Record<string, string>): Promise<AppProcess> {
  const port = await freePort()
  // `--import tsx` keeps it one process, so the PID we stop is the app itself.
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    env: { ...process.env, ...env, PORT: String(port), HOST: '127.0.0.1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  const collect = (chunk: Buffer) => {
    output += chunk.toString()
    if (output.length > 200_000) output = output.slice(-100_000)
  }
  child.stdout?.on('data', collect)
  child.stderr?.on('data', collect)
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const url = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 60_000
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${script} exited early: ${output}`)
    if (Date.now() > deadline) {
      child.kill('SIGKILL')
      throw new Error(`${script} did not listen within 60 s: ${output}`)
    }
    try {
      await fetch(`${url}/orders`)
      break
    } catch {
      await sleep(50)
    }
  }
  return {
    url,
    pid: child.pid ?? 0,
    child,
    output: () => output,
    async stop(signal: NodeJS.Signals = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill(signal)
        await exited
      }
    },
  }
}

/**
 * The causes of the store failures an app logged (the guard's 'idempotency store failed' line,
 * its `err.message`) in its output after `from` characters, as 'cause' → count: what a 503 of
 * the store answered came from.
 */
export function loggedStoreFailures(app: AppProcess, from = 0): Map<string, number> {
  const output = app.output()
  const causes = new Map<string, number>()
  for (const line of output.slice(from <= output.length ? from : 0).split('\n')) {
    if (!line.includes('idempotency store failed')) continue
    let cause = line.slice(0, 300)
    try {
      const entry = JSON.parse(line) as { err?: { message?: unknown } }
      if (typeof entry.err?.message === 'string') cause = entry.err.message
    } catch {
      // Not a JSON log line: the line itself.
    }
    causes.set(cause, (causes.get(cause) ?? 0) + 1)
  }
  return causes
}
