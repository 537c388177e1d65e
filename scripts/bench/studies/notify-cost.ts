/**
 * `npx tsx scripts/bench/studies/notify-cost.ts [--against <dir>] [--rounds n] [--calls n]`: what the
 * Redis store's completion costs Redis, per call, with nobody waiting and with a waiter that
 * marked the record; and what a duplicate's IN_PROGRESS claim costs, not waiting and waiting.
 * One throwaway redis-server; each figure from `INFO commandstats` (the scripts' own time,
 * `cmdstat_evalsha` usec over calls, and the SPUBLISH and SETRANGE calls inside them), the slow
 * log's per-call durations (threshold 0), and the server's CPU time (/proc, user + system) over
 * the phase; with one replica attached, the replication stream's bytes per call
 * (master_repl_offset) and the replica's CPU time.
 *
 * `--against <dir>`: a tree holding another revision's `src/` (e.g. `git archive <rev> src |
 * tar -x -C <dir>`), measured in the same rounds, interleaved (ABBA), on the same server.
 * Nothing here asserts a timing: it prints ranges and medians over rounds.
 */
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { Redis } from 'ioredis'
import type { ClaimRequest, IdempotencyStore, OwnerRef } from '../../../src/core/store.js'
import { claimRequest } from '../../../src/testing/index.js'
import { commandCalls, startRedisServer } from '../../redis-server.js'

const args = process.argv.slice(2)
const option = (name: string, fallback: string): string =>
  args.includes(name) ? (args[args.indexOf(name) + 1] as string) : fallback
const against = args.includes('--against') ? resolve(option('--against', '')) : undefined
const ROUNDS = Number(option('--rounds', '8'))
const CALLS = Number(option('--calls', '20000'))
const BATCH = 200
const TIMES = { leaseMs: 30_000, replayWindowMs: 60_000, failureRetentionMs: 30_000 }

type StoreFactory = (options: { redis: Redis; keyPrefix: string }) => IdempotencyStore
interface Variant {
  readonly name: string
  readonly create: StoreFactory
}

async function variantOf(name: string, root: string): Promise<Variant> {
  const module = (await import(pathToFileURL(`${root}/src/stores/redis/index.ts`).href)) as {
    redisStore: StoreFactory
  }
  return { name, create: module.redisStore }
}

const variants: Variant[] = [await variantOf('this tree', resolve(import.meta.dirname, '../../..'))]
if (against !== undefined) variants.push(await variantOf(`--against ${against}`, against))

// Every command goes to the slow log (threshold 0) with its duration: the phase's per-call times.
const server = await startRedisServer({
  config: {
    'maxmemory-policy': 'noeviction',
    save: '',
    'slowlog-log-slower-than': '0',
    'slowlog-max-len': String(CALLS + 100),
  },
})
const admin = new Redis(server.port, '127.0.0.1')
// One replica: what each call adds to the replication stream (master_repl_offset) is counted too.
const replica = await startRedisServer({
  config: { 'maxmemory-policy': 'noeviction', save: '', replicaof: `127.0.0.1 ${server.port}` },
})
for (let i = 0; i < 100 && !/state=online/.test(await admin.info('replication')); i++) {
  await new Promise((resolve) => setTimeout(resolve, 100))
}
const replOffset = async () => Number(/master_repl_offset:(\d+)/.exec(await admin.info('replication'))?.[1])

/** A server's CPU time so far, in microseconds (utime + stime, clock ticks of 10 ms). */
function serverCpuMicros(pid = server.pid): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
  return (Number(fields[11]) + Number(fields[12])) * 10_000
}

function request(prefix: string, i: number, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return claimRequest(`${prefix}:idem:1:d1:op:${i.toString(16).padStart(16, '0')}`, TIMES, {
    fingerprint: 'f1:aa',
    ...overrides,
  })
}

async function inBatches<T>(count: number, call: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = []
  for (let at = 0; at < count; at += BATCH) {
    out.push(...(await Promise.all(Array.from({ length: Math.min(BATCH, count - at) }, (_, j) => call(at + j)))))
  }
  return out
}

interface Phase {
  /** The scripts' own time per call, µs (cmdstat_evalsha usec / calls). */
  readonly scriptUs: number
  /**
   * The same from the slow log's per-call durations (whole µs): the mean of their middle half,
   * which a call descheduled by the machine's other work does not move.
   */
  readonly scriptMidUs: number
  /** The server's CPU per call, µs (/proc). */
  readonly cpuUs: number
  /** The replica's CPU per call, µs (/proc). */
  readonly replicaCpuUs: number
  /** Bytes of the replication stream per call (master_repl_offset). */
  readonly replBytes: number
  readonly spublish: number
  readonly setrange: number
  /** The SPUBLISH and SETRANGE calls' own time, µs per call of each (0 when none ran). */
  readonly spublishUs: number
  readonly setrangeUs: number
}

async function measure(calls: number, run: () => Promise<unknown>): Promise<Phase> {
  await admin.config('RESETSTAT')
  await admin.call('SLOWLOG', 'RESET')
  const cpu = serverCpuMicros()
  const replicaCpu = serverCpuMicros(replica.pid)
  const offset = await replOffset()
  await run()
  const cpuUs = (serverCpuMicros() - cpu) / calls
  const replBytes = ((await replOffset()) - offset) / calls
  // The replica applies what the master sent: wait until it has, then read its CPU.
  await admin.wait(1, 10_000)
  const replicaCpuUs = (serverCpuMicros(replica.pid) - replicaCpu) / calls
  const log = (await admin.call('SLOWLOG', 'GET', '-1')) as [number, number, number, string[]][]
  const durations = log
    .filter((entry) => String(entry[3][0]).toLowerCase() === 'evalsha')
    .map((entry) => Number(entry[2]))
    .sort((x, y) => x - y)
  const middle = durations.slice(Math.floor(durations.length / 4), Math.ceil((durations.length * 3) / 4))
  const scriptMidUs = middle.reduce((sum, v) => sum + v, 0) / Math.max(1, middle.length)
  const info = await admin.info('commandstats')
  const usec = (name: string) => Number(new RegExp(`^cmdstat_${name}:calls=\\d+,usec=(\\d+)`, 'm').exec(info)?.[1] ?? 0)
  const counted = await commandCalls(admin)
  const spublish = counted.spublish ?? 0
  const setrange = counted.setrange ?? 0
  // RESETSTAT and the INFO themselves are not scripts; only the phase's EVALSHA calls count.
  return {
    scriptUs: usec('evalsha') / calls,
    scriptMidUs,
    cpuUs,
    replicaCpuUs,
    replBytes,
    spublish,
    setrange,
    spublishUs: spublish === 0 ? 0 : usec('spublish') / spublish,
    setrangeUs: setrange === 0 ? 0 : usec('setrange') / setrange,
  }
}

interface Round {
  readonly complete: Phase
  readonly completeWaited: Phase
  readonly inProgress: Phase
  readonly inProgressWaiting: Phase
}

async function round(variant: Variant, n: number): Promise<Round> {
  await admin.flushall()
  const redis = new Redis(server.port, '127.0.0.1', { commandTimeout: 10_000 })
  await redis.ping()
  const store = variant.create({ redis, keyPrefix: `v${n}` })
  const prefix = `v${n}`
  // A subscriber on every key whose completion is waited for, as a waiting process has.
  const subscriber = new Redis(server.port, '127.0.0.1')
  try {
    const hold = async (claim: ClaimRequest): Promise<OwnerRef> => {
      const result = await store.claim(claim)
      if (result.kind !== 'ACQUIRED') throw new Error(result.kind)
      return { key: claim.key, owner: claim.owner, attempt: result.attempt, rev: result.rev }
    }
    const response = Buffer.from(JSON.stringify({ status: 201, body: { id: 1 } }))
    // Nobody waits: claim, then complete.
    const refs = await inBatches(CALLS, (i) => hold(request(prefix, i)))
    const inProgress = await measure(CALLS, () => inBatches(CALLS, (i) => store.claim(request(prefix, i))))
    const complete = await measure(CALLS, () =>
      inBatches(CALLS, (i) => store.complete(refs[i] as OwnerRef, response, TIMES)),
    )
    // A waiter: claim, a duplicate's waiting claim (IN_PROGRESS, marks), then complete.
    const waitedPrefix = `${prefix}w`
    const waitedRefs = await inBatches(CALLS, (i) => hold(request(waitedPrefix, i)))
    for (let at = 0; at < CALLS; at += 1_000) {
      await subscriber.ssubscribe(...waitedRefs.slice(at, at + 1_000).map((ref) => ref.key))
    }
    const inProgressWaiting = await measure(CALLS, () =>
      inBatches(CALLS, (i) => store.claim(request(waitedPrefix, i, { wait: true }))),
    )
    const completeWaited = await measure(CALLS, () =>
      inBatches(CALLS, (i) => store.complete(waitedRefs[i] as OwnerRef, response, TIMES)),
    )
    return { complete, completeWaited, inProgress, inProgressWaiting }
  } finally {
    await store.close()
    redis.disconnect()
    subscriber.disconnect()
  }
}

const results = new Map<string, Round[]>(variants.map((variant) => [variant.name, []]))
try {
  let n = 0
  // One warm-up round each (scripts loaded, allocator warm), then ABBA rounds.
  for (const variant of variants) await round(variant, n++)
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? variants : [...variants].reverse()
    for (const variant of order) results.get(variant.name)?.push(await round(variant, n++))
  }
} catch (error) {
  admin.disconnect()
  await replica.stop()
  await server.stop()
  throw error
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}
const figure = (values: number[]) =>
  `${median(values).toFixed(2)} (${Math.min(...values).toFixed(2)}..${Math.max(...values).toFixed(2)})`

console.log(
  `Redis ${(await admin.info('server')).match(/redis_version:(\S+)/)?.[1]}; ${CALLS} calls per phase, ${ROUNDS} rounds, batches of ${BATCH}`,
)
console.log(
  'µs per call, median (range) over rounds: the scripts own time (commandstats mean | slow log, mean of the middle half) | the server CPU (/proc)',
)
for (const [name, rounds] of results) {
  console.log(`\n${name}`)
  for (const phase of ['complete', 'completeWaited', 'inProgress', 'inProgressWaiting'] as const) {
    const phases = rounds.map((r) => r[phase])
    const label = {
      complete: 'complete, nobody waits',
      completeWaited: 'complete, a waiter marked it',
      inProgress: 'claim answering IN_PROGRESS, not waiting',
      inProgressWaiting: 'claim answering IN_PROGRESS, waiting',
    }[phase]
    console.log(
      `  ${label.padEnd(42)} script ${figure(phases.map((p) => p.scriptUs))} | slow log ${figure(phases.map((p) => p.scriptMidUs))} | cpu ${figure(phases.map((p) => p.cpuUs))}` +
        ` | replica cpu ${figure(phases.map((p) => p.replicaCpuUs))} | replication bytes ${figure(phases.map((p) => p.replBytes))}` +
        ` | SPUBLISH/call ${(median(phases.map((p) => p.spublish)) / CALLS).toFixed(2)} (${figure(phases.map((p) => p.spublishUs))} µs each)` +
        ` | SETRANGE/call ${(median(phases.map((p) => p.setrange)) / CALLS).toFixed(2)} (${figure(phases.map((p) => p.setrangeUs))} µs each)`,
    )
  }
}
// Paired: each round of one variant against the round of the other next to it (ABBA order).
const [a, b] = [...results.values()]
if (a !== undefined && b !== undefined) {
  console.log(`\nthis tree minus --against, per pair of adjacent rounds, µs per call: median (range)`)
  for (const phase of ['complete', 'completeWaited', 'inProgress', 'inProgressWaiting'] as const) {
    const script = a.map((r, i) => r[phase].scriptUs - (b[i]?.[phase].scriptUs ?? 0))
    const mid = a.map((r, i) => r[phase].scriptMidUs - (b[i]?.[phase].scriptMidUs ?? 0))
    const cpu = a.map((r, i) => r[phase].cpuUs - (b[i]?.[phase].cpuUs ?? 0))
    const replicaCpu = a.map((r, i) => r[phase].replicaCpuUs - (b[i]?.[phase].replicaCpuUs ?? 0))
    console.log(
      `  ${phase.padEnd(18)} script ${figure(script)} | slow log ${figure(mid)} | cpu ${figure(cpu)} | replica cpu ${figure(replicaCpu)}`,
    )
  }
}

admin.disconnect()
await replica.stop()
await server.stop()
