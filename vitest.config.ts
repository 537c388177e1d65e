import { configDefaults, defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    globals: false,
    include: ['test/**/*.test.ts'],
    // The fault suite runs on its own: `npm run test:faults` (vitest.faults.config.ts); the
    // nemesis too (vitest.nemesis.config.ts).
    exclude: [...configDefaults.exclude, 'test/faults/**', 'test/nemesis/**'],
    globalSetup: ['test/setup/prisma.ts', 'test/setup/redis.ts', 'test/setup/postgres.ts'],
    // Redis-backed files share one server and flush it between tests: run files one at a time.
    fileParallelism: false,
    // The JSON report lets .ci/run print one plain "N passed, N failed" closing line.
    reporters: ['default', 'json'],
    outputFile: { json: '.test-results/main.json' },
    testTimeout: 20_000,
    hookTimeout: 20_000,
    typecheck: { enabled: true, include: ['test/types/**/*.test-d.ts'] },
    coverage: {
      provider: 'v8',
      include: ['src/**/*.ts', 'plugins/**/*.ts'],
      // The command runs only as a child process (test/admin/cli.test.ts), which v8 coverage
      // of this process cannot see; what it calls (inspectScope, store.read) is measured here.
      exclude: ['src/admin/cli.ts'],
      reporter: ['text-summary'],
      thresholds: { lines: 90, functions: 95, branches: 82, statements: 90 },
    },
  },
})
