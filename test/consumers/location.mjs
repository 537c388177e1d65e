// Where the consumer projects live: outside the clone. Node looks for a package in every
// node_modules up the directory tree, so a project inside the clone would find the repository's
// devDependencies (ioredis, pg, every framework) and hide a missing peer. One directory per
// clone, named from the clone's path, so two clones on one machine do not share projects.
import { createHash } from 'node:crypto'
import { tmpdir } from 'node:os'
import { join, relative, resolve } from 'node:path'

/** The consumer projects' directory for the clone at `root`. */
export function consumersDir(root) {
  const dir =
    process.env.IDEMKIT_CONSUMERS_DIR ??
    join(tmpdir(), `idemkit-consumers-${createHash('sha256').update(resolve(root)).digest('hex').slice(0, 12)}`)
  const inside = relative(resolve(root), resolve(dir))
  if (!inside.startsWith('..') && !inside.startsWith('/')) {
    throw new Error(`the consumer projects must live outside the clone (${root}), not in ${dir}`)
  }
  return dir
}
