/**
 * The servers under test load the compiled package (`dist/`), as users run it: the bench
 * scripts build it first unless it is newer than every source file.
 */
import { execFileSync } from 'node:child_process'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'

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

/** Runs `npm run build` unless dist/ is up to date. */
export function ensureBuilt(): void {
  if (!builtIsFresh()) execFileSync('npm', ['run', 'build'], { stdio: 'ignore' })
}
