/**
 * Issue 46, item 9: on a machine without the server binaries the tests start, `npm test` went on
 * into the suite and failed there. Now its first step (scripts/test-servers.mjs, the `pretest`)
 * installs them where it can (root with apt-get) and otherwise stops at once with the command to
 * run. Here a user who cannot install (`nobody`) runs `npm test` with a PATH that has node, npm,
 * sh and apt-get but no Redis binaries: it stops within seconds, names the exact apt-get line and
 * runs no test. With the binaries on PATH the step passes, so npm goes on to the suite.
 */
import { execFile } from 'node:child_process'
import { chmodSync, chownSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

const root = resolve(import.meta.dirname, '../..')
const NOBODY = 65534

interface Ran {
  readonly code: number | null
  readonly output: string
  readonly ms: number
}

/** `npm <args>` in `cwd` with `PATH` and a home of its own, as `nobody` unless `asRoot`. */
function npm(cwd: string, path: string, home: string, args: readonly string[], asRoot = false): Promise<Ran> {
  const started = performance.now()
  return new Promise((resolveRun) => {
    execFile(
      '/usr/bin/npm',
      args,
      {
        cwd,
        ...(asRoot ? {} : { uid: NOBODY, gid: NOBODY }),
        env: { PATH: path, HOME: home, npm_config_cache: join(home, '.npm'), npm_config_update_notifier: 'false' },
        timeout: 120_000,
      },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : null
        resolveRun({ code, output: `${stdout}${stderr}`, ms: performance.now() - started })
      },
    )
  })
}

describe.runIf(process.getuid?.() === 0)('npm test on a machine without the Redis binaries', () => {
  let home: string
  let bin: string
  let project: string

  beforeAll(() => {
    home = mkdtempSync(join(tmpdir(), 'idemkit-nobody-'))
    chownSync(home, NOBODY, NOBODY)
    // node, npm, sh and apt-get: a Debian machine where nobody installed Redis (PostgreSQL's
    // binaries are found in /usr/lib/postgresql, as Debian puts them).
    bin = mkdtempSync(join(tmpdir(), 'idemkit-path-'))
    for (const name of ['node', 'npm', 'sh', 'apt-get']) symlinkSync(`/usr/bin/${name}`, join(bin, name))
    chmodSync(bin, 0o755)
    // What `npm test` reads before its first test (package.json and the pretest's script), in a
    // folder `nobody` can read: the checkout itself may sit in a folder only root can enter.
    project = mkdtempSync(join(tmpdir(), 'idemkit-project-'))
    mkdirSync(join(project, 'scripts'))
    copyFileSync(join(root, 'package.json'), join(project, 'package.json'))
    copyFileSync(join(root, 'scripts/test-servers.mjs'), join(project, 'scripts/test-servers.mjs'))
    chmodSync(project, 0o755)
    chmodSync(join(project, 'scripts'), 0o755)
  })

  afterAll(() => {
    rmSync(home, { recursive: true, force: true })
    rmSync(bin, { recursive: true, force: true })
    rmSync(project, { recursive: true, force: true })
  })

  it('stops at once with the apt-get line, and runs no test, for a user who cannot install', async () => {
    const ran = await npm(project, bin, home, ['test', '--', 'test/unit/encoding.test.ts'])

    expect(ran.code).not.toBe(0)
    expect(ran.output).toContain('npm test needs redis-server')
    expect(ran.output).toContain('sudo apt-get install -y redis-server redis-tools redis-sentinel')
    expect(ran.output).not.toMatch(/Test Files|passed|failed \(/)
    // Before the suite: no vitest start, no server started (well under the suite's own start-up).
    expect(ran.ms).toBeLessThan(30_000)
  })

  it('lets npm go on to the tests when the binaries are on PATH (as root: nothing left to install)', async () => {
    const ran = await npm(root, `${bin}:/usr/bin:/bin`, home, ['run', 'pretest'], true)

    expect(ran.output).not.toContain('npm test needs')
    expect(ran.output).not.toContain('installing')
    expect(ran.code).toBe(0)
  })
})
