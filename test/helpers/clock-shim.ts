/**
 * A server's wall clock, shifted and stepped by the test: the `LD_PRELOAD` shim
 * test/helpers/clock-shift.c, built here with the system's C compiler, adds the milliseconds in a
 * file (read at every call) to each wall-clock read (`gettimeofday`, `clock_gettime` of
 * `CLOCK_REALTIME`) of a process started with `env`. Writing the file steps that clock at once;
 * the monotonic clock is left alone.
 */
import { execFileSync } from 'node:child_process'
import { chmodSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface ClockShim {
  /** The environment a server gets to run under the shim. */
  readonly env: Readonly<Record<string, string>>
  /** The shift now, ms (what the wall clock reads minus the true time). */
  shift(): number
  /** Steps the clock to `ms` ahead of the true time (behind when negative). */
  set(ms: number): void
  /** Removes the shim and its file (after the server stopped). */
  remove(): void
}

/** Builds the shim (once per call) and its shift file, `initialMs` in it. */
export function buildClockShim(initialMs = 0): ClockShim {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-clock-'))
  // Readable by a server run as another user (PostgreSQL runs as `postgres` under root).
  chmodSync(dir, 0o755)
  const shim = join(dir, 'clock-shift.so')
  try {
    execFileSync('cc', ['-shared', '-fPIC', '-O2', '-o', shim, 'test/helpers/clock-shift.c', '-ldl'])
  } catch (error) {
    rmSync(dir, { recursive: true, force: true })
    throw new Error(`the clock shim is built with cc: install a C compiler (apt-get install gcc): ${error}`)
  }
  const file = join(dir, 'shift')
  let shift = initialMs
  // Written aside and renamed over the file: a read never finds it empty (a shift of 0).
  const write = () => {
    writeFileSync(`${file}.next`, String(shift), { mode: 0o644 })
    renameSync(`${file}.next`, file)
  }
  write()
  return {
    env: { LD_PRELOAD: shim, CLOCK_SHIFT_FILE: file },
    shift: () => shift,
    set(ms) {
      shift = Math.round(ms)
      write()
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  }
}
