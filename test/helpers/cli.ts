/** Runs the `idemkit` command from source in a child process, as an operator would. */
import { execFile } from 'node:child_process'

export interface CliRun {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** `idemkit <args>` with `env` on top of a clean environment (PATH only). */
export function cli(args: readonly string[], env: Record<string, string> = {}, timeoutMs = 60_000): Promise<CliRun> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'src/admin/cli.ts', ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, timeout: timeoutMs },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : -1
        resolve({ code, stdout, stderr })
      },
    )
  })
}
