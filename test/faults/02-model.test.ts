/**
 * Fault 2: a model-based test of the Redis store and the executor on a real Redis. fast-check
 * generates sequences of claim (with or without start, recover or takeover), start, renew,
 * complete, markFailed, release, inspect, whole `execute()` calls and waits that let leases,
 * retention and replay windows run out on Redis's clock; every reply must match the pure
 * reference model in test/helpers/store-model.ts. Counterexamples fast-check found are kept
 * below as explicit command sequences (a seed and path replay only while the arbitraries stay
 * exactly as they were; a sequence replays for good) and run first.
 */
import fc from 'fast-check'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { redisStore } from '../../src/stores/redis/index.js'
import type { RedisStore } from '../../src/stores/redis/redis-store.js'
import { recordFigures } from '../helpers/figures.js'
import {
  ClaimCommand,
  ExecuteCommand,
  HOLDER,
  InspectCommand,
  KEYS_PER_RUN,
  LEASE_MS,
  type Model,
  modelCommands,
  type Real,
  ReleaseCommand,
  RenewCommand,
  StartCommand,
  WaitCommand,
} from '../helpers/store-model.js'

const RUNS = 300
const MAX_COMMANDS = 25

/**
 * Shrunk counterexamples from fast-check, each found by this test against a deliberately broken
 * script (the seed and path are those of that run), kept so the same defect can never come back
 * unnoticed.
 */
const REGRESSIONS = [
  {
    what: 'a takeover of a CLAIMED record whose lease ran out gives the executor attempt + 1 (claim.lua step 6)',
    found: 'seed 813049667, path 1:3:4:4:4',
    commands: () => [
      new ClaimCommand(1, 0, 0, false, false),
      new WaitCommand(LEASE_MS + 5),
      new ExecuteCommand(1, 0, 'complete', false, false),
    ],
  },
  {
    what: 'renew really moves the lease (docs/design.md §7 defect 3)',
    found: 'seed 350080668, path 9:3:5:5:4:6:4',
    commands: () => [new ClaimCommand(0, 1, 1, true, false), new RenewCommand(0, HOLDER, 0), new InspectCommand(0, 1)],
  },
  {
    what: 'release never deletes an EXECUTING record',
    found: 'seed 1526529160, path 0:2:3:6:2',
    commands: () => [new ClaimCommand(1, 0, 0, true, false), new ReleaseCommand(1, HOLDER, 0, 0)],
  },
  {
    what: 'a transition answers ALREADY only at exactly rev + 1, never for an older rev',
    found: 'seed -402960710, path 77:4:5:6:4:5',
    commands: () => [
      new ExecuteCommand(0, 0, 'retryable', false, false),
      new ClaimCommand(0, 0, 0, true, false),
      new StartCommand(0, HOLDER, 0, -2),
    ],
  },
] as const

// Twice: as the store completes by default (complete.lua), and with the one-command completion
// (src/stores/redis/one-command.ts: SET ... IFEQ on Valkey 8.1, compare-and-set.lua elsewhere).
describe.each([
  { completion: '', oneCommandCompletion: false },
  { completion: ' (oneCommandCompletion)', oneCommandCompletion: true },
])(
  'fault 2: the store and the executor against a reference model, on real Redis$completion',
  ({ completion, oneCommandCompletion }) => {
    let redis: Redis
    let store: RedisStore
    let run = 0
    const stats: Record<string, number> = {}
    let commands = 0

    beforeAll(async () => {
      redis = new Redis(inject('redisUrl'), { commandTimeout: 2_000, maxRetriesPerRequest: 1 })
      await redis.ping()
      store = redisStore({ redis, keyPrefix: 'model', oneCommandCompletion })
    })

    afterAll(async () => {
      await store.close()
      redis.disconnect()
    })

    const setup = () => {
      run++
      const model: Model = { records: Array.from({ length: KEYS_PER_RUN }, () => undefined), stats }
      const keys = Array.from(
        { length: KEYS_PER_RUN },
        (_, k) => `model:${process.pid}:${Number(oneCommandCompletion)}:${run}:${k}`,
      )
      const real: Real = { store, redis, keys }
      return { model, real }
    }

    const property = fc.asyncProperty(modelCommands(MAX_COMMANDS), async (cmds) => {
      commands += [...cmds].length
      await fc.asyncModelRun(setup, cmds)
    })

    it.each(REGRESSIONS)('keeps the counterexample: $what', async ({ commands }) => {
      await fc.asyncModelRun(setup, commands())
    })

    it(`matches the model in ${RUNS} generated runs`, async (context) => {
      const started = Date.now()
      const before = run

      const details = await fc.check(property, { numRuns: RUNS })

      const branches = Object.keys(stats).filter((name) => name !== 'waits')
      recordFigures(
        context,
        `2${oneCommandCompletion ? 'b' : ''}`,
        `model-based test of the store and executor on real Redis${completion}`,
        {
          runs: run - before,
          'commands run': commands,
          'model branches hit': `${branches.length} (${branches.filter((name) => name.startsWith('execute')).length} through execute())`,
          waits: stats.waits ?? 0,
          'kept counterexamples replayed': REGRESSIONS.length,
          'failure seed': details.failed ? `${details.seed} path ${details.counterexamplePath}` : 'none',
          'wall time s': Math.round((Date.now() - started) / 1000),
        },
      )
      expect(details.failed ? fc.defaultReportMessage(details) : 'ok').toBe('ok')
      expect(details.numRuns).toBe(RUNS)
    })
  },
)
