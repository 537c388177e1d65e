/**
 * `npm run bench:calibrate`: how much throughput a given amount of CPU per request costs on this
 * machine. The bare Fastify route of server.ts, in one process per setting, burns 0, 5, 10, 20
 * and 40 µs of CPU per request in its handler; rounds are interleaved as in run.ts. Where the
 * load generator and the server share the cores, a few microseconds per request already cost a
 * large share of a bare route's req/s: this is the yardstick for the ratios run.ts prints.
 * Nothing here asserts a timing: it prints figures.
 */
import type { ChildProcess } from 'node:child_process'
import autocannon from 'autocannon'
import { startBenchServer } from './common.js'

const BUSY_US = [0, 5, 10, 20, 40]
const ROUNDS = 3
const DURATION_S = 1
const CONNECTIONS = 32

interface Running {
  readonly busyUs: number
  readonly url: string
  readonly child: ChildProcess
}

async function start(busyUs: number): Promise<Running> {
  const started = await startBenchServer({ FRAMEWORK: 'fastify', MODE: 'bare', BUSY_US: String(busyUs) })
  return { busyUs, ...started }
}

async function cpuUs(server: Running): Promise<number> {
  const stats = (await (await fetch(`${server.url}/__stats`)).json()) as { cpuUs: number }
  return stats.cpuUs
}

async function measure(server: Running, durationS: number): Promise<{ rps: number; cpuPerRequest: number }> {
  const before = await cpuUs(server)
  const result = await autocannon({
    url: `${server.url}/first`,
    connections: CONNECTIONS,
    duration: durationS,
    sampleInt: 100,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ item: 'book', qty: 1 }),
  })
  const after = await cpuUs(server)
  const requests = Math.max(1, result.requests.total)
  return { rps: result.requests.total / Math.max(0.001, result.duration), cpuPerRequest: (after - before) / requests }
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number

const servers: Running[] = []
try {
  for (const busyUs of BUSY_US) servers.push(await start(busyUs))
  for (const server of servers) await measure(server, 0.3)
  const samples = new Map<number, Array<{ rps: number; cpuPerRequest: number }>>()
  for (let round = 0; round < ROUNDS; round++) {
    for (const server of servers)
      samples.set(server.busyUs, [...(samples.get(server.busyUs) ?? []), await measure(server, DURATION_S)])
  }
  console.log(
    `\n## Calibration (${new Date().toISOString().slice(0, 10)}): bare Fastify route plus CPU burnt per request\n`,
  )
  console.log(
    `Node ${process.version}; autocannon ${CONNECTIONS} connections, ${DURATION_S} s per run, ${ROUNDS} interleaved rounds; medians.\n`,
  )
  console.log('| CPU added µs/req | req/s | × bare | server CPU µs/req |')
  console.log('| ---: | ---: | ---: | ---: |')
  const bare = samples.get(0) ?? []
  for (const busyUs of BUSY_US) {
    const runs = samples.get(busyUs) ?? []
    const ratio = median(runs.map((run, i) => run.rps / Math.max(1e-9, bare[i]?.rps ?? 0)))
    console.log(
      `| ${busyUs} | ${median(runs.map((r) => r.rps)).toFixed(0)} | ${ratio.toFixed(2)} | ${median(runs.map((r) => r.cpuPerRequest)).toFixed(0)} |`,
    )
  }
} finally {
  for (const server of servers) server.child.kill('SIGKILL')
}
