/**
 * `npm run bench:micro`: the layer's own cost per request, in a tight loop, without HTTP and
 * without a network: the route guard of the compiled package (what both adapters call: key
 * header, principal, scope digest, fingerprint, executor, response capture and codec) on the
 * memory store and on a no-op store that answers at once, plus the parts on their own; and
 * `idempotent()` beside a bare `execute()` and an `Executor` made once, on the memory store and
 * on a Redis the run starts (scripts/redis-server.ts), with the wrapper's overhead over
 * `execute()` in one line at the end. CPU time per operation and garbage-collection time per
 * operation, medians of a few runs. Nothing here asserts a timing: it prints figures.
 */
import { execFileSync } from 'node:child_process'
import { PerformanceObserver } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { startRedisServer } from '../redis-server.js'
import { ensureBuilt } from './common.js'

ensureBuilt()
const core = (await import(
  new URL('../../dist/src/index.js', import.meta.url).href
)) as typeof import('../../src/index.js')
const guardModule = (await import(
  new URL('../../dist/src/http/guard.js', import.meta.url).href
)) as typeof import('../../src/http/guard.js')
const optionsModule = (await import(
  new URL('../../dist/src/http/options.js', import.meta.url).href
)) as typeof import('../../src/http/options.js')
const inputModule = (await import(
  new URL('../../dist/src/http/request-input.js', import.meta.url).href
)) as typeof import('../../src/http/request-input.js')
const codecModule = (await import(
  new URL('../../dist/src/http/response-codec.js', import.meta.url).href
)) as typeof import('../../src/http/response-codec.js')
type Store = import('../../src/index.js').IdempotencyStore

const quick = process.argv.includes('--quick')
const ITERATIONS = quick ? 20_000 : 100_000
const RUNS = quick ? 3 : 5
const SECRET = 'bench-secret-bench-secret-bench-secret'
const BODY = { item: 'book', qty: 1 }
const RESPONSE_BODY = Buffer.from(JSON.stringify({ ok: true, n: 1 }))
const RESPONSE_HEADERS = {
  'content-type': 'application/json; charset=utf-8',
  'content-length': String(RESPONSE_BODY.length),
}
const LOG = { info() {}, warn() {}, error() {} }

/**
 * A store that answers every call at once and keeps nothing: what is left of a request's cost
 * is the layer's. Every claim acquires, or with `replay` every claim answers a stored response.
 */
function noopStore(replay: boolean): Store {
  const codec = codecModule.responseCodec(['content-type', 'location'], 1 << 20)
  const stored = codec.encode({ status: 201, headers: RESPONSE_HEADERS, body: RESPONSE_BODY })
  const ok = { kind: 'OK', rev: 2 } as const
  return {
    name: 'noop',
    keyPrefix: 'bench',
    async claim(request) {
      if (replay) {
        return {
          kind: 'COMPLETED_REPLAY',
          response: stored,
          codec: codec.id,
          policy: request.policy,
          replayUntil: Date.now() + 1e6,
        }
      }
      return { kind: 'ACQUIRED', state: 'EXECUTING', attempt: 1, rev: 1, leaseUntil: Date.now() + request.leaseMs }
    },
    async start() {
      return ok
    },
    async complete() {
      return ok
    },
    async markFailed() {
      return ok
    },
    async release() {
      return { kind: 'OK', rev: 0 }
    },
    async renew() {
      return { kind: 'OK', leaseUntil: Date.now() + 30_000 }
    },
    async inspect() {
      return { kind: 'ABSENT' }
    },
    async close() {},
  }
}

function guardOn(store: Store) {
  const options = optionsModule.parseOptions<{ user: string }>({
    store,
    secrets: { current: 1, keys: { 1: SECRET } },
    principal: (request) => request.user,
  })
  return guardModule.createRouteGuard(options, options.route, 'POST /orders')
}

function input(key: string, body: unknown = BODY) {
  return inputModule.guardInput({
    method: 'POST',
    url: '/orders',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    rawHeaders: ['Content-Type', 'application/json', 'Idempotency-Key', key],
    body,
  })
}

const request = { user: 'alice' }
const captured = { status: 201, headers: RESPONSE_HEADERS, body: RESPONSE_BODY }

/** One request through the guard: begin, and for a run the handler's answer handed to finish. */
async function once(guard: ReturnType<typeof guardOn>, key: string, body?: unknown, keyFor = false): Promise<void> {
  const begun = await guard.begin(request, input(key, body), LOG)
  if (begun.kind !== 'run') return
  // The handler's derived key for one downstream call (docs/across-services.md).
  if (keyFor) begun.info.keyFor('charge')
  await begun.finish({ ok: true, value: captured })
}

interface Case {
  readonly name: string
  readonly setup?: () => Promise<void>
  readonly op: (i: number) => unknown
  /** Operations per run when not the default (a case with a network round trip takes fewer). */
  readonly iterations?: number
}

const memory = core.memoryStore({ keyPrefix: 'bench' })
const memoryGuard = guardOn(memory)
const noopGuard = guardOn(noopStore(false))
const noopReplayGuard = guardOn(noopStore(true))
const secrets = core.parseSecrets({ current: 1, keys: { 1: SECRET } })
const responseCodec = codecModule.responseCodec(['content-type', 'location'], 1 << 20)
const encoded = responseCodec.encode(captured)
const DIGEST = core.scopeDigest(secrets, 1, { principal: 'alice', key: 'k', operation: 'POST /orders' })

/**
 * One function three ways on one store: `idempotent()` (the key taken from the argument, the
 * argument fingerprinted, the outcome turned into the value), a bare `execute()` per call with
 * the same scope and a fingerprint made once, and an `Executor` made once and called in two
 * phases. Each first execution runs a fresh key; each replay the same key.
 */
function wrapperCases(
  label: string,
  store: () => Store,
  iterations?: number,
  ready: () => Promise<void> = async () => undefined,
): Case[] {
  const operation = 'charge-order'
  const secretsInput = { current: 1, keys: { 1: SECRET } }
  const result = { chargeId: 'ch-1', amount: 100 }
  const order = (id: string) => ({ id, amount: 100 })
  const fingerprint = core.fingerprint({ method: 'CALL', path: '', body: { json: [order('x')] } })
  const base = () => ({
    store: store(),
    secrets: secretsInput,
    operation,
    codec: core.jsonCodec<typeof result>(),
    policy: core.resolvePolicy({}),
  })
  let wrapped: ((order: { id: string; amount: number }) => Promise<unknown>) | undefined
  const wrapper = () => {
    wrapped ??= core.idempotent(async (_order: { id: string; amount: number }) => result, {
      store: store(),
      secrets: secretsInput,
      operation,
      key: 'id',
    })
    return wrapped
  }
  let settings: ReturnType<typeof base> | undefined
  const bare = (id: string) => {
    settings ??= base()
    return core.execute({ ...settings, scope: { principal: '', key: id }, fingerprint, action: () => result })
  }
  let executor: InstanceType<typeof core.Executor<typeof result>> | undefined
  const phases = async (id: string) => {
    executor ??= new core.Executor<typeof result>(base())
    const begun = await executor.begin({ scope: { principal: '', key: id }, fingerprint }, undefined)
    if (begun.kind === 'RUN') await begun.finish({ ok: true, value: result })
  }
  const fresh = (i: number) => `first-${process.pid}-${i}-${Math.random()}`
  return [
    {
      name: `${label}: idempotent(), first execution`,
      setup: ready,
      op: (i) => wrapper()(order(fresh(i))),
      iterations,
    },
    { name: `${label}: execute(), first execution`, setup: ready, op: (i) => bare(fresh(i)), iterations },
    { name: `${label}: Executor made once, first execution`, setup: ready, op: (i) => phases(fresh(i)), iterations },
    {
      name: `${label}: idempotent(), replay`,
      setup: async () => {
        await ready()
        await wrapper()(order('replayed'))
      },
      op: () => wrapper()(order('replayed')),
      iterations,
    },
    {
      name: `${label}: execute(), replay`,
      setup: async () => {
        await ready()
        await bare('replayed')
      },
      op: () => bare('replayed'),
      iterations,
    },
    {
      name: `${label}: Executor made once, replay`,
      setup: async () => {
        await ready()
        await phases('replayed')
      },
      op: () => phases('replayed'),
      iterations,
    },
  ]
}

/** The Redis store of this process, on the server the run started (REDIS_URL), keys of its own. */
let redisClient: Redis | undefined
let redis: Store | undefined
function benchRedisStore(): Store {
  if (redis !== undefined) return redis
  const url = process.env.BENCH_REDIS_URL
  if (url === undefined)
    throw new Error('BENCH_REDIS_URL is not set: the run starts a redis-server for the Redis cases')
  redisClient = new Redis(url, { commandTimeout: 2000, maxRetriesPerRequest: 1, autoResendUnfulfilledCommands: false })
  redis = core.redisStore({ redis: redisClient, keyPrefix: `bench-${process.pid}` })
  return redis
}

const CASES: Case[] = [
  { name: 'memory store: first execution', op: (i) => once(memoryGuard, `first-${i}-${Math.random()}`) },
  { name: 'memory store: replay', setup: () => once(memoryGuard, 'replayed'), op: () => once(memoryGuard, 'replayed') },
  {
    name: 'memory store: 422',
    setup: () => once(memoryGuard, 'mismatched'),
    op: () => once(memoryGuard, 'mismatched', { item: 'pen', qty: 2 }),
  },
  { name: 'no-op store: first execution', op: (i) => once(noopGuard, `first-${i}`) },
  {
    name: 'no-op store: first execution calling keyFor once',
    op: (i) => once(noopGuard, `first-${i}`, undefined, true),
  },
  { name: 'no-op store: replay', op: () => once(noopReplayGuard, 'replayed') },
  {
    name: 'part: scope digest',
    op: (i) => core.scopeDigest(secrets, 1, { principal: 'alice', key: `k-${i}`, operation: 'POST /orders' }),
  },
  {
    name: 'part: fingerprint',
    op: () =>
      core.fingerprint({
        method: 'POST',
        path: '/orders',
        query: '',
        contentType: 'application/json',
        body: { json: BODY },
      }),
  },
  {
    name: 'part: keyFor (a derived key)',
    op: (i) => core.derivedKey(secrets, 1, DIGEST, `charge:${i}`),
  },
  { name: 'part: response encode', op: () => responseCodec.encode(captured) },
  { name: 'part: response decode', op: () => responseCodec.decode(encoded, responseCodec.id) },
  { name: 'part: owner token', op: () => core.newOwnerToken() },
  ...wrapperCases('memory store', () => memory),
  ...wrapperCases('Redis store', benchRedisStore, quick ? 2_000 : 10_000, async () => {
    benchRedisStore()
    await redisClient?.ping()
  }),
]

/** The cases whose figures the closing line compares: idempotent() and execute(), by store and path. */
const OVERHEAD = [
  ['memory store', 'first execution'],
  ['memory store', 'replay'],
  ['Redis store', 'first execution'],
  ['Redis store', 'replay'],
] as const

let gcMs = 0
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) gcMs += entry.duration
}).observe({ entryTypes: ['gc'] })

async function measure(test: Case): Promise<{ cpuUs: number; gcUs: number }> {
  const iterations = test.iterations ?? ITERATIONS
  const gcBefore = gcMs
  const before = process.cpuUsage()
  for (let i = 0; i < iterations; i++) {
    const result = test.op(i)
    if (result instanceof Promise) await result
  }
  const cpu = process.cpuUsage(before)
  await new Promise((resolve) => setImmediate(resolve)) // let the GC observer report
  return { cpuUs: (cpu.user + cpu.system) / iterations, gcUs: ((gcMs - gcBefore) * 1000) / iterations }
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number

const only = process.argv.indexOf('--case')
if (only !== -1) {
  // One case in this process: no other case's records or garbage in its heap.
  const test = CASES[Number(process.argv[only + 1])] as Case
  await test.setup?.()
  await measure(test) // warm-up
  const runs: { cpuUs: number; gcUs: number }[] = []
  for (let r = 0; r < RUNS; r++) runs.push(await measure(test))
  const cpu = median(runs.map((run) => run.cpuUs))
  const gc = median(runs.map((run) => run.gcUs))
  console.log(`| ${test.name} | ${cpu.toFixed(2)} | ${gc.toFixed(2)} |`)
  await memory.close()
  await redis?.close()
  redisClient?.disconnect()
} else {
  console.log(
    `bench:micro, ${ITERATIONS} operations per run (the Redis cases ${quick ? 2_000 : 10_000}), median of ${RUNS} runs, each case in its own process; Node ${process.version}`,
  )
  console.log('')
  console.log('| operation | CPU µs/op | GC µs/op |')
  console.log('| --- | ---: | ---: |')
  const server = await startRedisServer()
  const cpuOf = new Map<string, number>()
  try {
    for (let i = 0; i < CASES.length; i++) {
      const args = [
        '--import',
        'tsx',
        fileURLToPath(import.meta.url),
        '--case',
        String(i),
        ...(quick ? ['--quick'] : []),
      ]
      const row = execFileSync(process.execPath, args, {
        env: { ...process.env, NODE_ENV: 'production', BENCH_REDIS_URL: server.url },
        encoding: 'utf8',
      })
      process.stdout.write(row)
      const cells = row.split('|').map((cell) => cell.trim())
      cpuOf.set(cells[1] ?? '', Number(cells[2]))
    }
  } finally {
    await server.stop()
  }
  // The one line: what idempotent() adds to a bare execute() call with the same scope, and to
  // an Executor made once (execute() makes its executor, and parses its secrets, per call).
  const delta = (wrapper: number, bare: number) =>
    `${wrapper - bare >= 0 ? '+' : '−'}${Math.abs(wrapper - bare).toFixed(2)}`
  const overhead = OVERHEAD.map(([store, path]) => {
    const wrapper = cpuOf.get(`${store}: idempotent(), ${path}`) ?? Number.NaN
    const bare = cpuOf.get(`${store}: execute(), ${path}`) ?? Number.NaN
    const once = cpuOf.get(`${store}: Executor made once, ${path}`) ?? Number.NaN
    return `${store.replace(' store', '')} ${path} ${delta(wrapper, bare)} µs (${delta(wrapper, once)} over an Executor made once)`
  })
  console.log('')
  console.log(`idempotent() over a bare execute(), CPU per call: ${overhead.join('; ')}`)
  await memory.close()
}
