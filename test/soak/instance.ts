/**
 * One app instance of the soak run (run.ts): the nemesis app (test/nemesis/app.ts), and beside
 * it a sampler that appends one JSON line to SOAK_SAMPLES every SOAK_SAMPLE_MS (10 s): the
 * process's RSS and heap, the event-loop delay (perf_hooks.monitorEventLoopDelay: p50, p99 and
 * max over the interval, reset after each sample), the active resources by type
 * (process.getActiveResourcesInfo(): timers, sockets, ...) and how many of the sockets are the
 * load's, accepted by the app's server (counted from the `net.server.socket` diagnostics channel
 * until each closes): the load opens and closes keep-alive connections as faults hold its
 * requests, so the handles the soak judges are the others.
 */
import { subscribe } from 'node:diagnostics_channel'
import { appendFileSync } from 'node:fs'
import type { Socket } from 'node:net'
import { monitorEventLoopDelay } from 'node:perf_hooks'

/** One sample of an instance process; `time` is epoch ms. */
export interface InstanceSample {
  readonly time: number
  readonly pid: number
  readonly instance: number
  readonly rss: number
  readonly heapUsed: number
  readonly heapTotal: number
  readonly external: number
  /** Event-loop delay over the interval beyond the monitor's 10 ms resolution, ms. */
  readonly loopP50: number
  readonly loopP99: number
  readonly loopMax: number
  /** Active resources by type (Timeout, TCPSocketWrap, ...). */
  readonly resources: Readonly<Record<string, number>>
  /** The sockets among them that the app's server accepted and that are still open. */
  readonly inbound: number
}

const file = process.env.SOAK_SAMPLES
if (!file) throw new Error('SOAK_SAMPLES is required')
const intervalMs = Number(process.env.SOAK_SAMPLE_MS ?? 10_000)
const instance = Number(process.env.SOAK_INSTANCE ?? 0)

const RESOLUTION_MS = 10
const delay = monitorEventLoopDelay({ resolution: RESOLUTION_MS })
/** The histogram holds the time between its timer's runs: the delay is what exceeds the resolution. */
const late = (ns: number) => Math.max(0, ns / 1e6 - RESOLUTION_MS)
delay.enable()

let inbound = 0
subscribe('net.server.socket', (message) => {
  inbound++
  ;(message as { socket: Socket }).socket.once('close', () => {
    inbound--
  })
})

function sample(): void {
  const memory = process.memoryUsage()
  const resources: Record<string, number> = {}
  for (const type of process.getActiveResourcesInfo()) resources[type] = (resources[type] ?? 0) + 1
  const line: InstanceSample = {
    time: Date.now(),
    pid: process.pid,
    instance,
    rss: memory.rss,
    heapUsed: memory.heapUsed,
    heapTotal: memory.heapTotal,
    external: memory.external,
    loopP50: late(delay.percentile(50)),
    loopP99: late(delay.percentile(99)),
    loopMax: late(delay.max),
    resources,
    inbound,
  }
  delay.reset()
  appendFileSync(file as string, `${JSON.stringify(line)}\n`)
}

// The sampler's own timer is one of the Timeouts it counts: it is there in every sample alike.
setInterval(sample, intervalMs)

await import('../nemesis/app.js')
