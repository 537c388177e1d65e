/**
 * `npm run bench:profile -- <mode> <scenario> [seconds] [framework]`: one server under test
 * (see server.ts) driven for a few seconds by autocannon, run under `node --cpu-prof`, then a
 * summary of where its CPU time went. Prints the server's user and system CPU per request, the
 * store's CPU per request (redis-server's, or every PostgreSQL process's for the postgres and
 * pg-floor and pg-rows modes, on a PostgreSQL cluster of its own), and the functions with the most
 * self time; the raw `.cpuprofile` stays in `.bench/profile-*` for Chrome DevTools.
 *
 * Example: `npm run bench:profile -- redis first 5 fastify`. Nothing here asserts a timing.
 */
import { randomBytes } from 'node:crypto'
import { readdirSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import pg from 'pg'
import { type PostgresServer, startPostgresServer } from '../postgres-server.js'
import { startRedisServer } from '../redis-server.js'
import { ensureBuilt, postgresCpuUs, redisCpuUs, startBenchServer } from './common.js'

const [mode = 'redis', scenario = 'first', seconds = '5', framework = 'fastify'] = process.argv.slice(2)
const TOP = 30
const dir = join('.bench', `profile-${framework}-${mode}-${scenario}`)
rmSync(dir, { recursive: true, force: true })
ensureBuilt()

const redisServer = await startRedisServer()
const redis = new Redis(redisServer.url)
let postgresServer: PostgresServer | undefined
async function stopStores(): Promise<void> {
  redis.disconnect()
  await Promise.all([redisServer.stop(), postgresServer?.stop()])
}
const onPostgres = mode === 'postgres' || mode === 'pg-floor' || mode === 'pg-rows'
if (onPostgres) {
  postgresServer = await startPostgresServer()
  const pool = new pg.Pool({ connectionString: postgresServer.url, max: 1 })
  const core = await import(new URL('../../dist/src/index.js', import.meta.url).href)
  await core.postgresStore({ pool, sweepIntervalMs: 0 }).migrate()
  await pool.end()
}
const storeCpuUs = () => (postgresServer ? Promise.resolve(postgresCpuUs(postgresServer.pid)) : redisCpuUs(redis))
const server = await startBenchServer(
  { FRAMEWORK: framework, MODE: mode, REDIS_URL: redisServer.url, DATABASE_URL: postgresServer?.url ?? '' },
  process.env.NO_PROF ? [] : ['--cpu-prof', '--cpu-prof-interval=100', `--cpu-prof-dir=${dir}`],
).catch(async (error: unknown) => {
  await stopStores()
  throw error
})
const child = server.child
try {
  const url = `${server.url}/${scenario}`
  const tag = randomBytes(4).toString('hex')
  const body = JSON.stringify({ item: 'book', qty: 1 })
  const keys = scenario === 'replay' ? Array.from({ length: 8 }, (_, i) => `${tag}-${i}`) : []
  for (const key of keys) {
    await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body })
  }
  let counter = 0
  const cpuOf = (pid: number) => {
    // /proc/<pid>/stat fields 14 and 15 (utime, stime), in clock ticks of 10 ms.
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
    return { user: Number(fields[11]) * 10_000, system: Number(fields[12]) * 10_000 }
  }
  const before = { server: cpuOf(child.pid as number), store: await storeCpuUs() }
  const result = await autocannon({
    url,
    connections: 32,
    duration: Number(seconds),
    requests: [
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        setupRequest: (request) => {
          const key = keys.length > 0 ? (keys[counter++ % keys.length] as string) : `${tag}-${counter++}`
          request.headers = { ...request.headers, 'idempotency-key': key }
          return request
        },
      },
    ],
  })
  const after = { server: cpuOf(child.pid as number), store: await storeCpuUs() }
  const n = Math.max(1, result.requests.total)
  const per = (value: number) => (value / n).toFixed(1)
  console.log(
    `${framework}/${mode}/${scenario}: ${Math.round(result.requests.total / result.duration)} req/s (under the profiler), ` +
      `server user ${per(after.server.user - before.server.user)} µs/req, system ${per(after.server.system - before.server.system)} µs/req, ` +
      `${postgresServer ? 'PostgreSQL' : 'redis-server'} ${per(after.store - before.store)} µs/req, non-2xx ${result.non2xx}`,
  )
} finally {
  child.kill('SIGTERM')
  await new Promise((resolve) => child.once('exit', resolve))
  await stopStores()
}
if (!process.env.NO_PROF) summarize(dir)

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}

/** Prints self time per function of the main thread's profile (the largest file). */
function summarize(directory: string): void {
  const files = readdirSync(directory).filter((name) => name.endsWith('.cpuprofile'))
  const main = files
    .map((name) => ({ name, size: readFileSync(join(directory, name)).length }))
    .sort((a, b) => b.size - a.size)[0]
  if (main === undefined) return
  const profile = JSON.parse(readFileSync(join(directory, main.name), 'utf8')) as {
    nodes: ProfileNode[]
    samples: number[]
    timeDeltas: number[]
  }
  const time = new Map<number, number>()
  profile.samples.forEach((id, i) => {
    time.set(id, (time.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0))
  })
  const self = new Map<string, number>()
  for (const node of profile.nodes) {
    const { functionName, url: file, lineNumber } = node.callFrame
    const where = file.replace(/.*node_modules\//, '').replace(/.*\/(dist|scripts)\//, '$1/')
    const name = `${functionName || '(anonymous)'} ${where}${where ? `:${lineNumber + 1}` : ''}`
    self.set(name, (self.get(name) ?? 0) + (time.get(node.id) ?? 0))
  }
  const idle = self.get('(idle) ') ?? 0
  let busy = -idle
  for (const value of self.values()) busy += value
  console.log(`\nbusy ${(busy / 1000).toFixed(0)} ms; self time, share of busy time (${join(directory, main.name)}):`)
  for (const [name, value] of [...self]
    .filter(([name]) => name !== '(idle) ')
    .sort((a, b) => b[1] - a[1])
    .slice(0, TOP)) {
    console.log(`${((100 * value) / busy).toFixed(1).padStart(6)} %  ${name}`)
  }
}
