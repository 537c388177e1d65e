import { existsSync } from 'node:fs'
import { defineConfig } from 'vitest/config'
import { consumersDir } from './test/consumers/location.mjs'
import main from './vitest.config.js'

/**
 * The HTTP table and the in-flight tests on NestJS 11 (platform-express and platform-fastify).
 * Nest's packages import each other by name, so an npm alias cannot stand in for them; the
 * NestJS 11 consumer project that test/consumers/run.mjs installs from the registry (cjs-nestjs11, outside the clone: test/consumers/location.mjs) is
 * used instead: its @nestjs packages, rxjs and reflect-metadata are given to the adapter under
 * test in place of the devDependencies (NestJS 12). test/compat/nest-major.check.ts checks
 * that the run really is on 11. Run `node test/consumers/run.mjs cjs-nestjs11` first.
 */
const nest11 = `${consumersDir(import.meta.dirname)}/cjs-nestjs11/node_modules`
if (!existsSync(`${nest11}/@nestjs/core`)) {
  throw new Error('NestJS 11 is not installed: run `node test/consumers/run.mjs cjs-nestjs11` first')
}
const ALIASED = [
  '@nestjs/common',
  '@nestjs/core',
  '@nestjs/platform-express',
  '@nestjs/platform-fastify',
  'rxjs',
  'reflect-metadata',
]

export default defineConfig({
  ...main,
  resolve: {
    alias: ALIASED.map((name) => ({ find: new RegExp(`^${name}(/.*)?$`), replacement: `${nest11}/${name}$1` })),
  },
  test: {
    ...main.test,
    include: ['test/compat/nest-major.check.ts', 'test/http/table.test.ts', 'test/http/in-flight.test.ts'],
    testNamePattern: 'NestJS major|on nest-express|on nest-fastify',
    typecheck: { enabled: false },
    coverage: { enabled: false },
    outputFile: { json: '.test-results/nest11.json' },
  },
})
