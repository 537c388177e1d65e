import { defineConfig } from 'vitest/config'

/**
 * The nemesis (issue 25): the checker's own tests and the short fixed seed set, each run a real
 * store, three app processes, proxies and faults (test/nemesis/). Files and tests run one at a
 * time; `npm run test:nemesis` runs any seed, store and duration by hand.
 */
export default defineConfig({
  test: {
    globals: false,
    include: ['test/nemesis/**/*.test.ts'],
    // The app processes load the ORM kits, the Prisma client among them.
    globalSetup: ['test/setup/prisma.ts'],
    fileParallelism: false,
    sequence: { concurrent: false },
    testTimeout: 240_000,
    hookTimeout: 60_000,
  },
})
