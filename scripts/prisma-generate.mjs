// Generates the tests' Prisma client (test/prisma/schema.prisma -> test/prisma/generated) when it
// is missing, or always with --force; the vitest setups and `npm run typecheck` run it.
//
// Prisma 7's client runs on PostgreSQL through its driver adapter (@prisma/adapter-pg) with the
// query compiler shipped in the npm packages: no engine at run time. `prisma generate` itself
// needs no engine either, but the CLI first looks for a schema engine binary and downloads one
// from binaries.prisma.sh when it has none, which fails offline. PRISMA_SCHEMA_ENGINE_BINARY,
// when it names an existing file, stops that lookup; generate never runs it, so the Node.js
// binary stands in (a path that does not exist is refused: "provided path ... can't be
// resolved"). CHECKPOINT_DISABLE turns off the CLI's update check (another request).
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const schema = join(root, 'test/prisma/schema.prisma')
const client = join(root, 'test/prisma/generated/client.ts')

/** Writes the client unless it is there (or `force`). */
export function prismaGenerate({ force = false } = {}) {
  if (!force && existsSync(client)) return
  const cli = createRequire(join(root, 'package.json')).resolve('prisma/build/index.js')
  execFileSync(process.execPath, [cli, 'generate', '--schema', schema], {
    cwd: root,
    stdio: ['ignore', 'ignore', 'inherit'],
    env: {
      ...process.env,
      PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY || process.execPath,
      CHECKPOINT_DISABLE: '1',
      PRISMA_HIDE_UPDATE_MESSAGE: '1',
    },
  })
  if (!existsSync(client)) throw new Error(`prisma generate wrote no ${client}`)
}

if (process.argv[1] === fileURLToPath(import.meta.url)) prismaGenerate({ force: process.argv.includes('--force') })
