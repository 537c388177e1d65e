/**
 * Fault 21: a Redis failover under load. Two app processes on a Sentinel deployment (master,
 * one replica, three sentinels) take 100 keys, one new key every 10 ms; the replica is paused
 * (SIGSTOP) so it falls behind (without durability, 48 MB are written first, past the kernel's
 * socket buffers), the master is SIGKILLed, the replica is continued and Sentinel promotes it. Then every key is retried. With `durability: { replicas: 1 }` every key whose
 * client got a 2xx replays from the new master and no handler runs twice; without it the test
 * counts the acknowledged keys the failover lost (the reason for the option).
 */
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { afterEach, describe, expect, it } from 'vitest'
import { commandCalls } from '../../scripts/redis-server.js'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, post, sleep, startFaultApp } from '../helpers/fault-app.js'
import { recordFigures, tally } from '../helpers/figures.js'
import { type RedisSentinelSetup, SENTINEL_NAME, startRedisSentinel } from '../helpers/redis-sentinel.js'

const LEASE_MS = 1_500
const KEYS = 100
const USER = 'fault21'

interface Trial {
  readonly acknowledged: number
  readonly replayed: number
  readonly lost: number
  readonly secondExecutions: number
  /** Keys whose handler never ran that still answer 409 or recovery-required: held by nobody. */
  readonly leftExecuting: number
  readonly failoverMs: number
  /** DBSIZE of the promoted node once the failover ended, before the old master is restarted. */
  readonly keysWhenPromoted: number
  /** The role the promoted node reports after the retries (a flip back would wipe it). */
  readonly roleAfterRetries: string
  /** The idemkit function libraries on the promoted node, and the FCALLs it ran after promotion. */
  readonly librariesOnNewMaster: number
  readonly fcallsOnNewMaster: number
  readonly firstAnswers: string
  readonly retryAnswers: string
}

/**
 * Writes 48 MB to the master while its replica is stopped: more than the kernel's socket buffers
 * between the two can hold (TCP autotuning grows a receive buffer up to `net.ipv4.tcp_rmem`'s
 * maximum, 32 MB on this machine), so the records written after it wait in the master's own
 * memory, which the SIGKILL loses, however large the machine's buffers. Without it the run
 * without durability lost 0 or 1 acknowledged keys in three runs here.
 */
async function fillSocketBuffers(masterPort: number): Promise<void> {
  const filler = new Redis(masterPort, '127.0.0.1', { commandTimeout: 10_000 })
  try {
    const block = Buffer.alloc(1 << 20, 'f')
    for (let n = 0; n < 48; n++) await filler.set(`fault21:filler:${n}`, block)
  } finally {
    filler.disconnect()
  }
}

async function withNode<T>(port: number, use: (node: Redis) => Promise<T>): Promise<T> {
  const node = new Redis(port, '127.0.0.1', { commandTimeout: 10_000 })
  try {
    return await use(node)
  } finally {
    node.disconnect()
  }
}

const statusOf = (a: Answer) => `${a.status}${a.replayed ? ' replay' : ''}${a.code ? ` ${a.code}` : ''}`

describe('fault 21: a Sentinel failover under load', () => {
  let setup: RedisSentinelSetup | undefined
  let apps: AppProcess[] = []
  let log: ExecutionLog | undefined

  afterEach(async () => {
    await Promise.all(apps.map((app) => app.stop()))
    apps = []
    await setup?.stop()
    setup = undefined
    log?.remove()
  })

  async function trial(durability: boolean): Promise<Trial> {
    setup = await startRedisSentinel()
    log = createExecutionLog()
    const env = {
      REDIS_SENTINELS: setup.sentinels.map((s) => `${s.host}:${s.port}`).join(','),
      REDIS_SENTINEL_NAME: SENTINEL_NAME,
      EXECUTION_LOG: log.path,
      IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
      REDIS_COMMAND_TIMEOUT_MS: '1000',
      ...(durability ? { IDEMPOTENCY_DURABILITY_REPLICAS: '1', IDEMPOTENCY_DURABILITY_TIMEOUT_MS: '100' } : {}),
    }
    apps = await Promise.all([startFaultApp(env), startFaultApp(env)])
    const masterPort = await setup.masterPort()
    const replica = setup.nodes.find((node) => node.port !== masterPort) as { pid: number }
    const keys = Array.from({ length: KEYS }, () => randomUUID())
    // 100 kB answers: while the replica is stopped, the replication stream outgrows the
    // kernel's socket buffers and waits in the master's memory, which the SIGKILL loses.
    const body = { item: 'failover', qty: 1, delayMs: 20, pad: 'p'.repeat(100_000) }
    const send = (i: number) =>
      post((apps[i % 2] as AppProcess).url, { user: USER, key: keys[i] as string, body, deadlineMs: 10_000 }).catch(
        (): Answer => ({ status: 0, replayed: false, retryAfter: null, body: '', code: 'connection' }),
      )

    // One new key every 10 ms; the replica stops once keys 0-19 are answered (so they are the
    // keys both trials acknowledge with a live replica, however slow the machine), the master
    // dies after key 79.
    const first: Promise<Answer>[] = []
    let promoted: Promise<{ port: number; ms: number }> | undefined
    let killedAt = 0
    for (let i = 0; i < KEYS; i++) {
      if (i === 20) {
        await Promise.all(first)
        process.kill(replica.pid, 'SIGSTOP')
        // Without durability, what the failover loses must be in the master's memory. With it,
        // the stream stays small enough for the kernel's buffers, so the stopped replica still
        // receives the claims made meanwhile (and maybe not their give-backs): the case of the
        // keys left EXECUTING under an owner that never runs.
        if (!durability) await fillSocketBuffers(masterPort)
      }
      first.push(send(i))
      await sleep(10)
      if (i === 79) {
        await setup.node(masterPort).stop()
        killedAt = performance.now()
        process.kill(replica.pid, 'SIGCONT')
        promoted = setup
          .failoverFrom(masterPort)
          .then((port) => ({ port, ms: Math.round(performance.now() - killedAt) }))
      }
    }
    const firstAnswers = await Promise.all(first)
    const { port: newMasterPort, ms: failoverMs } = await (promoted as Promise<{ port: number; ms: number }>)
    const keysWhenPromoted = await withNode(newMasterPort, async (node) => Number(await node.dbsize()))
    // One failover is the fault here: a second one, of a new master slowed by the old one's full
    // resync on a loaded machine, would promote a node that may not have synced yet and wipe the
    // promoted one (seen in CI: the promoted node a replica again after the retries).
    await setup.holdFailovers(60_000)
    // The old master comes back as a replica of the new one, so durable claims can be had again.
    await setup.restart(masterPort)

    // Every key retried until it is neither 409 nor 503 store-unavailable (at most ~15 s).
    const retryAnswers: Answer[] = []
    for (let i = 0; i < KEYS; i++) {
      let answer = await send(i)
      for (let round = 0; round < 60; round++) {
        if (answer.status !== 409 && answer.code !== 'IDEMPOTENCY_STORE_UNAVAILABLE' && answer.status !== 0) break
        await sleep(250)
        answer = await send(i)
      }
      retryAnswers.push(answer)
    }
    // The retries that ran a handler completed through the functions on the promoted node: they
    // came with the replication stream, or the store loaded them on "Function not found". A
    // replica counts no FCALL from its master (Redis 7 replicates a function's effects, not the
    // call), so every FCALL counted here is one the apps sent after the promotion.
    const { librariesOnNewMaster, fcallsOnNewMaster, roleAfterRetries } = await withNode(
      newMasterPort,
      async (node) => {
        const libraries = (await node.call('function', 'list')) as unknown[][]
        return {
          librariesOnNewMaster: libraries.filter((entry) => String(entry[1]).startsWith('idemkit_')).length,
          fcallsOnNewMaster: (await commandCalls(node)).fcall ?? 0,
          roleAfterRetries: /role:(\w+)/.exec(await node.info('replication'))?.[1] ?? 'unknown',
        }
      },
    )
    const acknowledged = firstAnswers.flatMap((a, i) => (a.status >= 200 && a.status < 300 ? [i] : []))
    const replayed = acknowledged.filter((i) => retryAnswers[i]?.status === 201 && retryAnswers[i]?.replayed)
    const executions = new Map<string, number>()
    for (const entry of log.executions())
      executions.set(String(entry.key), (executions.get(String(entry.key)) ?? 0) + 1)
    return {
      acknowledged: acknowledged.length,
      replayed: replayed.length,
      lost: acknowledged.length - replayed.length,
      secondExecutions: [...executions.values()].filter((n) => n > 1).length,
      leftExecuting: keys.filter(
        (key, i) =>
          !executions.has(key) &&
          (retryAnswers[i]?.status === 409 || retryAnswers[i]?.code === 'IDEMPOTENCY_RECOVERY_REQUIRED'),
      ).length,
      failoverMs,
      keysWhenPromoted,
      roleAfterRetries,
      librariesOnNewMaster,
      fcallsOnNewMaster,
      firstAnswers: tally(firstAnswers.map(statusOf)),
      retryAnswers: tally(retryAnswers.map(statusOf)),
    }
  }

  function figures(result: Trial): Record<string, string | number> {
    return {
      'first answers': result.firstAnswers,
      'keys acknowledged (2xx)': result.acknowledged,
      'acknowledged keys that replay after the failover': result.replayed,
      'acknowledged keys lost': result.lost,
      'keys whose handler ran twice': result.secondExecutions,
      'keys left EXECUTING although no handler ran': result.leftExecuting,
      'retry answers': result.retryAnswers,
      'master killed → replica promoted, ms': result.failoverMs,
      'keys on the promoted node when promoted (DBSIZE)': result.keysWhenPromoted,
      'role of the promoted node after the retries': result.roleAfterRetries,
      'idemkit function libraries on the promoted node': result.librariesOnNewMaster,
      'FCALLs the promoted node ran': result.fcallsOnNewMaster,
    }
  }

  it('with durability { replicas: 1 }: every acknowledged key replays from the new master, no handler runs twice', async (context) => {
    const result = await trial(true)
    recordFigures(context, '21a', 'Sentinel failover under load, durability { replicas: 1 }', figures(result))
    expect(result.acknowledged).toBeGreaterThan(10)
    expect(result.roleAfterRetries).toBe('master')
    expect(result.lost).toBe(0)
    expect(result.secondExecutions).toBe(0)
    // A claim given back after a shortfall it could not send settles itself (issue 24, finding 4).
    expect(result.leftExecuting).toBe(0)
    // The store's functions answer on the promoted node.
    expect(result.librariesOnNewMaster).toBeGreaterThan(0)
    expect(result.fcallsOnNewMaster).toBeGreaterThan(0)
  })

  it('without durability: the failover loses acknowledged keys, and their retries run the handler again', async (context) => {
    const result = await trial(false)
    recordFigures(context, '21b', 'Sentinel failover under load, no durability', figures(result))
    // The fault is real: what the replica had not received when the master died is gone.
    expect(result.acknowledged).toBeGreaterThan(result.lost)
    expect(result.lost).toBeGreaterThan(0)
    expect(result.secondExecutions).toBeGreaterThan(0)
  })
})
