/**
 * Fault 12: Redis Cluster. The store takes an ioredis `Cluster`; fault 1's workload (one key,
 * 100 concurrent requests, two app processes, 100 trials) on a local cluster of three masters
 * gives one execution per key, and no CROSSSLOT, MOVED or ASK error reaches a client, also
 * while slots and their records move between masters (`redis-cli --cluster reshard` runs in
 * the middle of the trials). Then `recordStats()` (what `idemkit stats` runs) counts the
 * records on every master. Waiting duplicates are woken by SPUBLISH on the key's shard, sent
 * only for records a waiting claim marked: completions nobody waits for publish on no master.
 */
import { randomUUID } from 'node:crypto'
import { Cluster, Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { commandCalls } from '../../scripts/redis-server.js'
import { recordStats } from '../../src/admin/index.js'
import { redisStore } from '../../src/stores/redis/index.js'
import type { AppProcess } from '../helpers/app-process.js'
import {
  expectOncePerTrial,
  REQUESTS,
  runTrial,
  summarise,
  TRIALS,
  type TrialResult,
} from '../helpers/concurrency-trials.js'
import { countingStore } from '../helpers/counting-store.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { harness, sleep } from '../helpers/executor-harness.js'
import { startFaultApp } from '../helpers/fault-app.js'
import { range, recordFigures, tally } from '../helpers/figures.js'
import { type RedisCluster, startRedisCluster } from '../helpers/redis-cluster.js'

const RESHARD_AT_TRIAL = 30
const RESHARD_SLOTS = 2_000
const REDIRECTION_ERRORS = /CROSSSLOT|MOVED|ASK |TRYAGAIN|CLUSTERDOWN/

describe('fault 12: Redis Cluster of three masters', () => {
  let cluster: RedisCluster
  let apps: AppProcess[] = []
  let log: ExecutionLog

  beforeAll(async () => {
    cluster = await startRedisCluster()
    log = createExecutionLog()
    const env = { REDIS_CLUSTER: cluster.startupNodes, EXECUTION_LOG: log.path }
    apps = await Promise.all([startFaultApp(env), startFaultApp(env)])
  })

  afterAll(async () => {
    await Promise.all(apps.map((app) => app.stop()))
    await cluster?.stop()
    log.remove()
  })

  it("runs fault 1's workload once per key, with slots moving mid-run, and no redirection error reaches a client", async (context) => {
    const user = `fault12-${randomUUID().slice(0, 8)}`
    const started = Date.now()
    const trials: TrialResult[] = []
    let reshard: Promise<void> | undefined
    let reshardSeconds = 0

    for (let trial = 0; trial < TRIALS; trial++) {
      if (trial === RESHARD_AT_TRIAL) {
        const at = Date.now()
        reshard = cluster.reshard(0, 1, RESHARD_SLOTS).then(() => {
          reshardSeconds = Math.round((Date.now() - at) / 1000)
        })
      }
      trials.push(await runTrial(apps, user, trial))
    }
    await reshard
    const summary = summarise(trials, log, user)
    const redirections = apps
      .map((app) => app.output())
      .join('\n')
      .match(REDIRECTION_ERRORS)

    recordFigures(context, '12', 'Redis Cluster (3 masters), fault 1 workload, slots resharded mid-run', {
      masters: cluster.nodes.map((node) => node.port).join(', '),
      trials: TRIALS,
      requests: TRIALS * REQUESTS,
      'slots moved during the trials (s)': `${RESHARD_SLOTS} from master 1 to master 2, from trial ${RESHARD_AT_TRIAL} (${reshardSeconds} s)`,
      'executions per trial': range(summary.executionsPerTrial),
      'fresh 201 per trial': range(summary.fresh),
      'distinct 2xx bodies per trial': range(summary.distinctBodies),
      'answers by status': summary.statuses,
      '5xx or no answer': summary.serverErrors,
      'redirection errors in app logs': redirections === null ? 0 : redirections[0],
      'wall time s': Math.round((Date.now() - started) / 1000),
    })
    expectOncePerTrial(summary)
    expect(redirections).toBeNull()
  })

  it('counts the records of every master with one scan (recordStats, as idemkit stats does)', async (context) => {
    const client = new Cluster(cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })))
    await new Promise((resolve) => client.once('ready', resolve))
    const store = redisStore({ redis: client, onEvent: () => undefined })
    try {
      const stats = await recordStats({ store })
      const perMaster = await Promise.all(client.nodes('master').map((node) => node.dbsize()))
      recordFigures(context, '12b', 'idemkit stats over the Cluster', {
        'keys per master': perMaster.join(', '),
        scanned: stats.scanned,
        'by state': JSON.stringify(stats.byState),
      })
      expect(perMaster.filter((keys) => keys > 0).length).toBeGreaterThan(1)
      expect(stats.scanned).toBe(perMaster.reduce((sum, keys) => sum + keys, 0))
      expect(stats.byState.COMPLETED).toBeGreaterThanOrEqual(TRIALS)
    } finally {
      await store.close()
      client.disconnect()
    }
  })

  /** SPUBLISH and SETRANGE calls (inside the scripts) summed over every master since `reset()`. */
  function masterCalls() {
    const nodes = cluster.nodes.map((node) => new Redis(node.port, '127.0.0.1', { commandTimeout: 5_000 }))
    return {
      reset: () => Promise.all(nodes.map((node) => node.config('RESETSTAT'))),
      async read() {
        const calls = await Promise.all(nodes.map((node) => commandCalls(node)))
        const sum = (name: string) => calls.reduce((total, c) => total + (c[name] ?? 0), 0)
        return {
          spublish: sum('spublish'),
          setrange: sum('setrange'),
          scripts: sum('evalsha') + sum('eval') + sum('fcall'),
        }
      },
      close: () => {
        for (const node of nodes) node.disconnect()
      },
    }
  }

  it('publishes on no master when nobody waits: completions and 409 duplicates send no SPUBLISH', async (context) => {
    const client = new Cluster(cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })))
    await new Promise((resolve) => client.once('ready', resolve))
    const store = redisStore({ redis: client, onEvent: () => undefined })
    const calls = masterCalls()
    try {
      await calls.reset()
      const scopes = Array.from({ length: 12 }, () => harness(store))
      const outcomes = await Promise.all(
        scopes.map(async (scope) => {
          const first = scope.run({ action: () => sleep(100).then(() => ({ done: true })) })
          await sleep(20)
          const duplicate = await scope.run()
          return [(await first).kind, duplicate.kind]
        }),
      )
      const counted = await calls.read()
      recordFigures(context, '12d', 'completions nobody waits for, on the Cluster', {
        keys: scopes.length,
        answers: tally(outcomes.flat()),
        'script calls': counted.scripts,
        'SPUBLISH calls': counted.spublish,
        'SETRANGE calls': counted.setrange,
      })
      expect(outcomes.flat().filter((kind) => kind === 'EXECUTED')).toHaveLength(scopes.length)
      expect(counted.scripts).toBeGreaterThanOrEqual(scopes.length * 2)
      expect(counted.spublish).toBe(0)
      expect(counted.setrange).toBe(0)
    } finally {
      calls.close()
      await store.close()
      client.disconnect()
    }
  })

  it('wakes waiting duplicates by sharded pub/sub on every master (SPUBLISH from the scripts, SSUBSCRIBE per shard)', async (context) => {
    const client = new Cluster(cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })))
    await new Promise((resolve) => client.once('ready', resolve))
    const counting = countingStore(redisStore({ redis: client, onEvent: () => undefined }))
    const calls = masterCalls()
    try {
      await calls.reset()
      // Keys on different masters; per key one 300 ms execution and 20 duplicates that wait.
      const scopes = Array.from({ length: 6 }, () => harness(counting.store))
      const lags: number[] = []
      const outcomes = await Promise.all(
        scopes.map(async (scope) => {
          let finishedAt = 0
          const first = scope.run({
            action: async () => {
              await sleep(300)
              finishedAt = performance.now()
              return { done: true }
            },
          })
          await sleep(50)
          const waiters = await Promise.all(
            Array.from({ length: 20 }, () =>
              scope.run({ inFlightWaitMs: 5_000 }).then((outcome) => {
                lags.push(Math.round(performance.now() - finishedAt))
                return outcome.kind
              }),
            ),
          )
          return [(await first).kind, ...waiters]
        }),
      )
      const counted = await calls.read()
      recordFigures(context, '12c', 'waiting duplicates on the Cluster', {
        keys: scopes.length,
        answers: tally(outcomes.flat()),
        'waiter answered after the execution ended, ms': range(lags),
        'inspect calls (polls)': counting.counts.inspect ?? 0,
        'claim calls': counting.counts.claim ?? 0,
        'SPUBLISH calls': counted.spublish,
        'SETRANGE calls (marks)': counted.setrange,
      })
      expect(outcomes.flat().filter((kind) => kind === 'EXECUTED')).toHaveLength(scopes.length)
      expect(outcomes.flat().filter((kind) => kind === 'REPLAYED')).toHaveLength(scopes.length * 20)
      // Woken by the notification: well before the 500 ms safety poll would have found it.
      expect(Math.max(...lags)).toBeLessThan(250)
      // One mark per key, by its first waiting claim; a publish exactly for each marked record.
      expect(counted.setrange).toBe(scopes.length)
      expect(counted.spublish).toBe(scopes.length)
    } finally {
      calls.close()
      await counting.store.close()
      client.disconnect()
    }
  })
})
