import { existsSync } from 'node:fs'
import { defineConfig } from 'vitest/config'
import { consumersDir } from './test/consumers/location.mjs'
import main from './vitest.config.js'

/**
 * The HTTP table, the in-flight tests and the OpenAPI document on NestJS 11 (platform-express and
 * platform-fastify) with @nestjs/swagger 11.
 * Nest's packages import each other by name, so an npm alias cannot stand in for them; the
 * NestJS 11 consumer project that test/consumers/run.mjs installs from the registry (cjs-nestjs11-swagger, outside the clone: test/consumers/location.mjs) is
 * used instead: its @nestjs packages, rxjs and reflect-metadata are given to the adapter under
 * test in place of the devDependencies (NestJS 12). test/compat/nest-major.check.ts checks
 * that the run really is on 11. Run `node test/consumers/run.mjs cjs-nestjs11-swagger` first.
 */
const nest11 = `${consumersDir(import.meta.dirname)}/cjs-nestjs11-swagger/node_modules`
if (!existsSync(`${nest11}/@nestjs/swagger`)) {
  throw new Error('NestJS 11 is not installed: run `node test/consumers/run.mjs cjs-nestjs11-swagger` first')
}
const ALIASED = [
  '@nestjs/common',
  '@nestjs/core',
  '@nestjs/platform-express',
  '@nestjs/platform-fastify',
  '@nestjs/swagger',
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
    include: [
      'test/compat/nest-major.check.ts',
      'test/http/table.test.ts',
      'test/http/in-flight.test.ts',
      'test/nestjs/openapi.test.ts',
    ],
    testNamePattern: 'NestJS major|on nest-express|on nest-fastify|@nestjs/swagger|@ApiIdempotent',
    typecheck: { enabled: false },
    coverage: { enabled: false },
    outputFile: { json: '.test-results/nest11.json' },
  },
})
