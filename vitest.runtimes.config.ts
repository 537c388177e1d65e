import { defineConfig } from 'vitest/config'
import main from './vitest.config.js'

/**
 * The HTTP table (test/http/table.test.ts) on `idemkit/fetch` under Bun and Deno, on the memory
 * and Redis stores: vitest cannot run inside them, so each serves the Web-standard apps as a
 * process of its own (test/runtimes/fetch-server.ts, from the `bun` and `deno` npm packages'
 * binaries) and the table drives them over real HTTP from here (test/helpers/table-targets.ts).
 */
export default defineConfig({
  ...main,
  test: {
    ...main.test,
    include: ['test/http/table.test.ts'],
    env: { IDEMKIT_TABLE_RUNTIMES: 'bun,deno' },
    typecheck: { enabled: false },
    coverage: { enabled: false },
    outputFile: { json: '.test-results/runtimes.json' },
  },
})
