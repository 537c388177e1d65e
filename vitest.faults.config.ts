import { defineConfig } from 'vitest/config'

/**
 * The fault suite (issue 6): real redis-server, cluster and app processes that the tests kill,
 * pause, restart and flood. Files run one at a time (they share the machine's two cores and
 * time their faults); the run ends with a summary of the figures each fault measured.
 */
export default defineConfig({
  test: {
    globals: false,
    include: ['test/faults/**/*.test.ts'],
    globalSetup: ['test/setup/prisma.ts', 'test/setup/redis.ts', 'test/setup/postgres.ts'],
    fileParallelism: false,
    sequence: { concurrent: false },
    // The summary reporter prints last and writes .test-results/faults.json (passed/failed
    // counts) for the closing line .ci/run prints.
    reporters: ['default', './test/faults/summary-reporter.ts'],
    testTimeout: 180_000,
    hookTimeout: 60_000,
  },
})
