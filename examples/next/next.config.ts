import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { NextConfig } from 'next'

const config: NextConfig = {
  // idemkit (and ioredis) loaded by Node from node_modules, not bundled: idemkit reads its Redis
  // scripts from its own folder, which a bundle does not have.
  serverExternalPackages: ['idemkit', 'ioredis'],
  // Only because this example lives in the idemkit repository, whose node_modules (two levels up)
  // hold next and react: a project of its own needs neither line.
  turbopack: { root: join(dirname(fileURLToPath(import.meta.url)), '../..') },
  outputFileTracingRoot: join(dirname(fileURLToPath(import.meta.url)), '../..'),
}

export default config
