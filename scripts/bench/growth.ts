/**
 * `npm run bench:growth [-- --modes redis,postgres] [-- --cases body-64k,body-1m,conn-256,fill-1m,fill-10m]
 * [-- --rounds 3] [-- --duration 3] [-- --expired 0.02] [-- --quick]`: what a request costs as the
 * work grows, against a baseline measured in the same run (a 1 KiB stored response, 32
 * connections, an emptied store): a larger response (64 KiB, 1 MiB), more connections (256), and
 * a store that already holds 1 or 10 million records (growth-cases.ts).
 *
 * The bench's own parts: its redis-server and PostgreSQL cluster (fsync off), one server.ts
 * process per store (Fastify with the layer; on PostgreSQL the sweeper every second,
 * `SWEEP_INTERVAL_MS=1000`), autocannon over loopback, and CPU per request read from /proc
 * around each run: the server process's, and redis-server's or every PostgreSQL process's.
 * The handler answers a JSON body of the case's size (`x-response-bytes`). Each server is warmed
 * up first (first executions and replays at the baseline). Per round, every case that leaves
 * the store as it found it (the baseline, the bodies, the connections) runs first executions
 * (a new key per request) then replays (8 completed keys), each followed by emptying the store
 * (FLUSHALL, TRUNCATE); the store's memory per record is taken over the first executions: Redis
 * `INFO memory` used_memory grown ÷ keys added, PostgreSQL's table with its TOAST and indexes
 * (pg_total_relation_size) grown ÷ rows added. Then the fills, ascending: records made by the
 * store itself (one real first execution through the server, with the bench's small default
 * answer), copied under other keys with their times rewritten: on Redis by a script writing
 * batches of `SET key record PXAT expiresAt - 1`, the record's replayUntil and expiresAt spread
 * over the next 24 hours (the default replay window) as records written over the last day
 * would be, so Redis expires them as it would; on PostgreSQL by `INSERT ... SELECT
 * generate_series` of the row, `--expired` of them (2 %) expiring from 2 minutes before to 10
 * minutes after the load, so the sweeper has work during the runs, then `VACUUM ANALYZE`. The
 * fills go into a second redis-server and cluster with servers of their own, so a fill's rounds
 * take turns with rounds of the baseline on the empty stores, and its ratios are against those.
 * Nothing here asserts a timing: it prints figures.
 */
import { randomBytes } from 'node:crypto'
import { loadavg } from 'node:os'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import pg from 'pg'
import { startPostgresServer } from '../postgres-server.js'
import { startRedisServer } from '../redis-server.js'
import { ensureBuilt, median, postgresCpuUs, processCpuUs, startBenchServer } from './common.js'
import {
  BASELINE,
  bytes,
  count,
  type GrowthCase,
  type GrowthMode,
  type GrowthSample,
  growthRow,
  parseGrowthArgs,
  times,
} from './growth-cases.js'

const options = parseGrowthArgs(process.argv.slice(2))
const BODY = JSON.stringify({ item: 'book', qty: 1 })
/** The table server.ts's PostgreSQL store writes (its default name). */
const TABLE = 'idemkit_records'
/** The replay window the records are spread over (the layer's default). */
const WINDOW_MS = 86_400_000
/** Warm-up: windows of first executions then replays at the baseline. */
const WARMUP_WINDOWS = options.quick ? 1 : 3
const WARMUP_WINDOW = options.quick ? 1_000 : 4_000

interface Stores {
  readonly redis: Redis
  readonly redisPid: number
  readonly pool: pg.Pool
  readonly postgresPid: number
}

interface Server {
  readonly mode: GrowthMode
  readonly stores: Stores
  readonly url: string
  readonly pid: number
  readonly kill: () => void
}

interface Sample extends GrowthSample {
  readonly requests: number
  readonly non2xx: number
  readonly errors: number
  /** First executions: the store's bytes grown per record added; records added per request. */
  readonly bytesPerRecord?: number
  readonly recordsPerRequest?: number
}

const post = (url: string, key: string, bodyBytes: number) =>
  fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-response-bytes': String(bodyBytes) },
    body: BODY,
  })

/** The store's size: Redis used_memory and keys, or the table's bytes (heap, TOAST, indexes) and rows. */
async function storeSize({ stores, mode }: Server): Promise<{ bytes: number; records: number }> {
  if (mode === 'redis') {
    const info = await stores.redis.info('memory')
    return {
      bytes: Number(/^used_memory:(\d+)/m.exec(info)?.[1] ?? Number.NaN),
      records: await stores.redis.dbsize(),
    }
  }
  const { rows } = await stores.pool.query(
    `SELECT pg_total_relation_size('${TABLE}')::float8 AS bytes, (SELECT count(*) FROM ${TABLE})::float8 AS records`,
  )
  return { bytes: rows[0].bytes, records: rows[0].records }
}

/**
 * The store's size once the requests still running when autocannon stopped have ended: read
 * until two readings 200 ms apart agree (the same records, bytes within 64 KiB; at most 5 s).
 */
async function settledSize(server: Server): Promise<{ bytes: number; records: number }> {
  let last = await storeSize(server)
  for (let i = 0; i < 25; i++) {
    await new Promise((resolve) => setTimeout(resolve, 200))
    const now = await storeSize(server)
    if (now.records === last.records && Math.abs(now.bytes - last.bytes) <= 65_536) return now
    last = now
  }
  return last
}

/** Empties the store (between the runs of the cases that start from an empty store). */
async function empty({ stores, mode }: Server): Promise<void> {
  if (mode === 'redis') await stores.redis.flushall('SYNC')
  else await stores.pool.query(`TRUNCATE ${TABLE}`)
}

/**
 * One autocannon run of `scenario` on `server` with the case's body and connections: for
 * `{ durationS }` seconds or `{ amount }` requests. `sizes`: take the store's growth per record.
 */
async function measure(
  server: Server,
  c: GrowthCase,
  scenario: 'first' | 'replay',
  load: { durationS: number } | { amount: number },
  sizes = false,
): Promise<Sample> {
  const { stores } = server
  const tag = `${c.name}-${scenario}-${randomBytes(4).toString('hex')}`
  const url = `${server.url}/${scenario}`
  const keys = scenario === 'replay' ? Array.from({ length: 8 }, (_, i) => `${tag}-${i}`) : []
  for (const key of keys) await post(url, key, c.bodyBytes)
  let counter = 0
  const nextKey = () => (keys.length > 0 ? (keys[counter++ % keys.length] as string) : `${tag}-${counter++}`)
  const storeCpu = () => (server.mode === 'redis' ? processCpuUs(stores.redisPid) : postgresCpuUs(stores.postgresPid))
  const sizeBefore = sizes ? await storeSize(server) : undefined
  const beforeStore = storeCpu()
  const before = processCpuUs(server.pid)
  const result = await autocannon({
    url,
    connections: c.connections,
    ...('amount' in load ? { amount: load.amount } : { duration: load.durationS }),
    sampleInt: 100,
    requests: [
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-response-bytes': String(c.bodyBytes) },
        body: BODY,
        setupRequest: (request) => {
          request.headers = { ...request.headers, 'idempotency-key': nextKey() }
          return request
        },
      },
    ],
  })
  const cpu = processCpuUs(server.pid) - before
  const store = storeCpu() - beforeStore
  const requests = Math.max(1, result.requests.total)
  const sizeAfter = sizes ? await settledSize(server) : undefined
  const added = sizeBefore && sizeAfter ? sizeAfter.records - sizeBefore.records : 0
  return {
    rps: result.requests.total / Math.max(0.001, result.duration),
    p99: result.latency.p99,
    cpuUs: cpu / requests,
    storeCpuUs: store / requests,
    requests: result.requests.total,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    ...(sizeBefore && sizeAfter
      ? {
          bytesPerRecord: added > 0 ? (sizeAfter.bytes - sizeBefore.bytes) / added : Number.NaN,
          recordsPerRequest: added / requests,
        }
      : {}),
  }
}

/** A Redis fill's template: a COMPLETED record the store wrote, its key's prefix and digest length. */
interface RedisTemplate {
  readonly record: Buffer
  readonly prefix: string
  readonly digestLength: number
}

/**
 * Each filled server's template, taken at its first fill, while the store holds nothing but the
 * template's record: a later fill's store also holds the records its runs wrote (with the case's
 * 1 KiB answer), which a look for a recent completed record could pick up instead.
 */
const redisTemplates = new Map<Server, RedisTemplate>()

/** The COMPLETED record (layout 2, state byte 'D') the store wrote last, on a store that holds little else. */
async function redisTemplate(server: Server): Promise<RedisTemplate> {
  const known = redisTemplates.get(server)
  if (known !== undefined) return known
  const { redis } = server.stores
  const templateKey = `fill-template-${randomBytes(4).toString('hex')}`
  const posted = Date.now()
  await post(`${server.url}/first`, templateKey, 0)
  let key: string | undefined
  let record: Buffer | undefined
  let cursor = '0'
  do {
    const [next, found] = await redis.scan(cursor, 'MATCH', 'bench:*', 'COUNT', 1000)
    cursor = next
    for (const candidate of found) {
      const value = await redis.getBuffer(candidate).catch(() => null)
      if (value === null || value[0] !== 2 || value[1] !== 0x44) continue
      // createdAt (offset 42): the latest record, written by the template's request.
      const createdAt = value.readDoubleBE(42)
      if (createdAt < posted - 1_000 || (record !== undefined && createdAt <= record.readDoubleBE(42))) continue
      key = candidate
      record = value
    }
  } while (cursor !== '0')
  if (key === undefined || record === undefined) throw new Error('no completed record to copy')
  const prefix = key.slice(0, key.lastIndexOf(':') + 1)
  const template = { record, prefix, digestLength: key.length - prefix.length }
  redisTemplates.set(server, template)
  return template
}

/**
 * Fills the Redis store up to `total` keys with copies of a record the store wrote: one first
 * execution through the server (the default small answer), its key's digest replaced and its
 * times rewritten (replayUntil = expiresAt spread over the next 24 hours, createdAt = updatedAt
 * a window before), by a script writing batches of SETs with the record's PXAT, as the store's
 * scripts write it (src/stores/record-layout.ts).
 */
async function fillRedis(server: Server, total: number): Promise<void> {
  const { redis } = server.stores
  const have = await redis.dbsize()
  if (have >= total) return
  const { record, prefix, digestLength } = await redisTemplate(server)
  const script = `
    local rec, prefix = ARGV[1], ARGV[2]
    local from, to, now, window, len = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
    local head, tail = string.sub(rec, 1, 26), string.sub(rec, 59)
    for i = from, to do
      local expires = now + 60000 + (i * 7919) % (window - 60000)
      local created = expires - window
      local digest = string.sub(redis.sha1hex('fill' .. i) .. redis.sha1hex('llif' .. i), 1, len)
      redis.call('SET', prefix .. digest, head .. struct.pack('>dddd', expires, expires, created, created) .. tail,
        'PXAT', string.format('%d', expires - 1))
    end
    return to - from + 1`
  const started = performance.now()
  const batch = 50_000
  for (let from = have; from < total; from += batch) {
    const to = Math.min(total, from + batch) - 1
    await redis.eval(script, 0, record, prefix, from, to, Date.now(), WINDOW_MS, digestLength)
  }
  console.error(
    `Redis: ${count(total - have)} records written in ${((performance.now() - started) / 1000).toFixed(0)} s`,
  )
}

/**
 * Fills the PostgreSQL table up to `total` rows with copies of a row the store wrote (one first
 * execution through the server), its key's digest replaced: `options.expiredShare` of them
 * expiring between 2 minutes ago and 10 minutes from now (so the sweeper, every second, finds
 * rows to delete all through the runs), the others over the next 24 hours.
 * Then VACUUM ANALYZE, so the runs do not meet a bulk load's first vacuum.
 */
async function fillPostgres(server: Server, total: number): Promise<void> {
  const { pool } = server.stores
  const have = Number((await pool.query(`SELECT count(*)::float8 AS n FROM ${TABLE}`)).rows[0].n)
  if (have >= total) return
  const templateKey = `fill-template-${randomBytes(4).toString('hex')}`
  await post(`${server.url}/first`, templateKey, 0)
  const template = (
    await pool.query(
      `SELECT key FROM ${TABLE} WHERE state = 'COMPLETED' AND created_at > now() - interval '1 minute' ORDER BY created_at DESC LIMIT 1`,
    )
  ).rows[0]?.key as string | undefined
  if (template === undefined) throw new Error('no completed row to copy')
  const prefix = template.slice(0, template.lastIndexOf(':') + 1)
  const started = performance.now()
  const batch = 1_000_000
  const expiredPer10k = Math.round(options.expiredShare * 10_000)
  for (let from = have; from < total; from += batch) {
    const to = Math.min(total, from + batch) - 1
    await pool.query(
      `INSERT INTO ${TABLE} (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, replay_until, expires_at, resp, created_at, updated_at)
       SELECT $1 || md5('fill' || g) || substr(md5('llif' || g), 1, greatest(0, length(t.key) - length($1) - 32)),
         t.state, t.owner, t.attempt, t.rev, t.op, t.fp, t.codec, t.policy, x.e - interval '1 day', x.e, x.e, t.resp,
         x.e - interval '1 day', x.e - interval '1 day'
       FROM (SELECT * FROM ${TABLE} WHERE key = $2) t, generate_series($3::bigint, $4::bigint) g,
         LATERAL (SELECT CASE WHEN (g * 7919) % 10000 < $5
           THEN now() + ((g * 31) % 720000 - 120000) * interval '1 millisecond'
           ELSE now() + (60000 + (g * 7919) % ${WINDOW_MS - 60_000}) * interval '1 millisecond' END AS e) x`,
      [prefix, template, from, to, expiredPer10k],
    )
  }
  await pool.query(`VACUUM ANALYZE ${TABLE}`)
  console.error(
    `PostgreSQL: ${count(total - have)} rows written and vacuumed in ${((performance.now() - started) / 1000).toFixed(0)} s`,
  )
}

/** Rows past their expiry: what the sweeper has left to delete. */
async function expiredRows({ stores, mode }: Server): Promise<number> {
  if (mode !== 'postgres') return 0
  return Number(
    (await stores.pool.query(`SELECT count(*)::float8 AS n FROM ${TABLE} WHERE expires_at <= now()`)).rows[0].n,
  )
}

interface Result {
  readonly c: GrowthCase
  readonly mode: GrowthMode
  readonly first: Sample[]
  readonly replay: Sample[]
  /** A fill's rounds of the baseline on the empty stores, taking turns with its own: what its ratios are against. */
  against?: { first: Sample[]; replay: Sample[] }
  /** After a fill: the store's bytes per record over all of it, and the expired rows before and after the runs. */
  note?: string
}

/** A redis-server, a PostgreSQL cluster, and a server.ts process on each per mode. */
interface Side {
  readonly servers: readonly Server[]
  stop(): Promise<void>
}

/** Starts the stores and the servers on them, migrates the table, and warms the servers up. */
async function startSide(modes: readonly GrowthMode[]): Promise<Side> {
  const [redisServer, postgresServer] = await Promise.all([startRedisServer(), startPostgresServer()])
  const redis = new Redis(redisServer.url)
  const pool = new pg.Pool({ connectionString: postgresServer.url, max: 2 })
  const stores: Stores = { redis, redisPid: redisServer.pid, pool, postgresPid: postgresServer.pid }
  const servers: Server[] = []
  const stop = async () => {
    for (const server of servers) server.kill()
    redis.disconnect()
    await pool.end()
    await Promise.all([redisServer.stop(), postgresServer.stop()])
  }
  try {
    const core = await import(new URL('../../dist/src/index.js', import.meta.url).href)
    await core.postgresStore({ pool, sweepIntervalMs: 0 }).migrate()
    for (const mode of modes) {
      const { url, child } = await startBenchServer({
        FRAMEWORK: 'fastify',
        MODE: mode,
        REDIS_URL: redisServer.url,
        DATABASE_URL: postgresServer.url,
        SWEEP_INTERVAL_MS: '1000',
      })
      servers.push({ mode, url, pid: child.pid as number, stores, kill: () => child.kill('SIGKILL') })
    }
    for (const server of servers) {
      for (let w = 0; w < WARMUP_WINDOWS; w++) {
        await measure(server, BASELINE, 'first', { amount: WARMUP_WINDOW })
        await measure(server, BASELINE, 'replay', { amount: WARMUP_WINDOW })
      }
      await empty(server)
    }
  } catch (error) {
    await stop()
    throw error
  }
  return { servers, stop }
}

async function main(): Promise<void> {
  const started = Date.now()
  const loadStart = loadavg()
  ensureBuilt()
  const fills = options.cases.filter((c) => c.fill > 0)
  const sides: Side[] = []
  try {
    const emptied = await startSide(options.modes)
    sides.push(emptied)
    // The fills go into stores of their own, so that their rounds take turns with the baseline's.
    const filled = fills.length === 0 ? undefined : await startSide(options.modes)
    if (filled) sides.push(filled)
    const results = new Map<string, Result>()
    const result = (c: GrowthCase, mode: GrowthMode) => {
      const id = `${c.name}/${mode}`
      const found = results.get(id) ?? { c, mode, first: [], replay: [] }
      results.set(id, found)
      return found
    }
    const load = { durationS: options.durationS }
    /** A case's first executions then its replays on `server`, emptying the store after each unless it holds a fill. */
    const run = async (server: Server, c: GrowthCase, into: { first: Sample[]; replay: Sample[] }) => {
      into.first.push(await measure(server, c, 'first', load, c.fill === 0))
      if (c.fill === 0) await empty(server)
      into.replay.push(await measure(server, c, 'replay', load))
      if (c.fill === 0) await empty(server)
    }
    // The cases that leave the store as they found it, interleaved round by round.
    // (Unless only fills were asked for: they run their own baseline rounds.)
    const unfilled = options.cases.filter((c) => c.fill === 0)
    for (let round = 0; round < (unfilled.length > 1 || fills.length === 0 ? options.rounds : 0); round++) {
      for (const c of unfilled) {
        for (const server of emptied.servers) await run(server, c, result(c, server.mode))
      }
    }
    // The fills, ascending, each then measured in rounds that take turns with the baseline on the empty stores.
    for (const c of fills) {
      for (const server of filled?.servers ?? []) {
        if (server.mode === 'redis') await fillRedis(server, c.fill)
        else await fillPostgres(server, c.fill)
      }
      const expiredBefore = await Promise.all((filled?.servers ?? []).map((server) => expiredRows(server)))
      for (let round = 0; round < options.rounds; round++) {
        for (const [i, server] of (filled?.servers ?? []).entries()) {
          const into = result(c, server.mode)
          into.against ??= { first: [], replay: [] }
          await run(emptied.servers[i] as Server, BASELINE, into.against)
          await run(server, c, into)
        }
      }
      for (const [i, server] of (filled?.servers ?? []).entries()) {
        const size = await storeSize(server)
        const into = result(c, server.mode)
        const what = server.mode === 'redis' ? 'Redis used_memory' : 'table, TOAST and indexes'
        into.note = `${count(size.records)} records, ${bytes(size.bytes)} (${what}): ${bytes(size.bytes / size.records)} per record`
        if (server.mode === 'postgres')
          into.note += `; expired rows ${expiredBefore[i]} before the runs, ${await expiredRows(server)} after`
      }
    }
    print([...results.values()], loadStart, Date.now() - started)
  } finally {
    for (const side of sides) await side.stop()
  }
}

function print(results: readonly Result[], loadStart: number[], elapsedMs: number): void {
  const load = (l: readonly number[]) => l.map((v) => v.toFixed(2)).join(', ')
  console.log(
    `\n## Cost as the work grows (${new Date().toISOString().slice(0, 10)}, ${options.rounds} round(s) of ${options.durationS} s)\n`,
  )
  console.log(
    `Load average (1, 5, 15 min): ${load(loadStart)} at the start, ${load(loadavg())} at the end. Wall time ${(elapsedMs / 1000).toFixed(0)} s.\n`,
  )
  console.log(
    '| store | case | body | connections | store holds | scenario | req/s | × | p99 ms | × | server CPU µs/req | × | store CPU µs/req | × | store bytes/record | non-2xx |',
  )
  console.log(
    '| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  )
  for (const mode of options.modes) {
    const base = results.find((r) => r.mode === mode && r.c === BASELINE)
    // A fill's own baseline rounds come as a row of their own before it.
    const rows = results
      .filter((r) => r.mode === mode)
      .flatMap((r): Result[] =>
        r.against === undefined
          ? [r]
          : [{ c: { ...BASELINE, name: `baseline beside ${r.c.name}` }, mode, ...r.against }, r],
      )
    for (const scenario of ['first', 'replay'] as const) {
      for (const r of rows) {
        const against = r.against ?? (r.c.name.startsWith('baseline') ? r : base)
        if (against === undefined) continue
        const row = growthRow(r[scenario], against[scenario])
        const sized = r[scenario].filter((s) => s.bytesPerRecord !== undefined)
        const perRecord = sized.length === 0 ? '' : bytes(median(sized.map((s) => s.bytesPerRecord as number)))
        const cells = [
          mode,
          r.c.name,
          bytes(r.c.bodyBytes),
          String(r.c.connections),
          r.c.fill === 0 ? 'empty' : count(r.c.fill),
          scenario,
          row.median.rps.toFixed(0),
          times(row.ratio.rps),
          row.median.p99.toFixed(1),
          times(row.ratio.p99),
          row.median.cpuUs.toFixed(0),
          times(row.ratio.cpuUs),
          row.median.storeCpuUs.toFixed(0),
          times(row.ratio.storeCpuUs),
          perRecord,
          String(r[scenario].reduce((sum, s) => sum + s.non2xx + s.errors, 0)),
        ]
        console.log(`| ${cells.join(' | ')} |`)
      }
    }
  }
  const notes = results.filter((r) => r.note !== undefined)
  if (notes.length > 0) console.log('')
  for (const r of notes) console.log(`- ${r.mode}, ${r.c.name}: ${r.note}`)
  const stored = results.flatMap((r) => r.first.map((s) => s.recordsPerRequest)).filter((n) => n !== undefined)
  if (stored.length > 0)
    console.log(
      `\nRecords added per first execution answered (those in flight when a run stopped add theirs too), lowest and highest over the runs: ${Math.min(...stored).toFixed(3)}-${Math.max(...stored).toFixed(3)}.`,
    )
}

await main()
