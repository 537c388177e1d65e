/**
 * The soak run's pass/fail (run.ts), from its samples alone, against the bounds docs/nemesis.md
 * states ("Soak"):
 *
 * - `violations`: none, from the load's per-key checks, the execution counts and the hangs;
 * - `rss-flat`, `handles-flat` and `timers-flat`: for every instance process that lived through
 *   at least 40 % of the time after the warm-up, the median of its last 3 samples is at most the
 *   bound above the median of its first 3 after the warm-up (RSS in bytes; active handles other
 *   than timers and the load's sockets, `ownHandles`; active timers);
 * - `store-connections-flat`: the same for the store's count of client connections;
 * - `p99`: every 10 s window after the warm-up, before the load's end and away from the faults (from a fault's start to
 *   `recoveryMs` after it healed, a window's requests in flight for up to the bound after its end) has its p99, over
 *   every request sent in it, within the bound;
 * - `recovery`: after each fault heals, the p99 of the requests sent each second is back within
 *   the bound for 5 seconds in a row within `recoveryMs`.
 */

export interface SoakBounds {
  /** Samples before this offset are not judged (JIT, pools filling, the heap finding its size). */
  readonly warmupMs: number
  /** p99 of every request sent in a 10 s window (and in each second, for recovery), ms. */
  readonly p99Ms: number
  /** How soon after a fault heals the per-second p99 is back within p99Ms, ms. */
  readonly recoveryMs: number
  /** RSS growth of an instance process after the warm-up, bytes. */
  readonly rssGrowth: number
  /** Growth of an instance process's active handles other than timers (sockets, servers, pipes). */
  readonly handlesGrowth: number
  /**
   * Growth of its active timers: they come and go with the requests in flight (each has its
   * timeouts), so only a growth well past what the in-flight requests explain is a leak.
   */
  readonly timersGrowth: number
  /** Growth of the store's client connections. */
  readonly storeConnectionsGrowth: number
}

/** One instance sample with its offset (ms since the load began). */
export interface ProcessSample {
  readonly t: number
  readonly pid: number
  readonly instance: number
  readonly rss: number
  /** Active resources other than timers and the load's sockets (`ownHandles`). */
  readonly handles: number
  /** Active timers (its `Timeout` entries). */
  readonly timers: number
}

/**
 * An instance's active handles as the soak judges them: its active resources but timers and the
 * sockets its server accepted from the load (`inbound`), which come and go with the load's
 * keep-alive pool. What is left, the server, the store's connections, pipes, is the process's own.
 */
export function ownHandles(resources: Readonly<Record<string, number>>, inbound = 0): number {
  const all = Object.entries(resources).reduce((sum, [type, n]) => (type === 'Timeout' ? sum : sum + n), 0)
  return all - inbound
}

export interface StoreSample {
  readonly t: number
  /** Client connections the store counts (null: it did not answer, as while it is down). */
  readonly connections: number | null
}

export interface FaultSpan {
  readonly kind: string
  readonly start: number
  readonly end: number
  readonly instance?: number
}

export interface SoakInput {
  readonly durationMs: number
  readonly bounds: SoakBounds
  readonly samples: readonly ProcessSample[]
  readonly store: readonly StoreSample[]
  /** p99 (ms) of every request sent in each 10 s window, by the window's start offset. */
  readonly windows: readonly { readonly start: number; readonly p99: number; readonly sent: number }[]
  /** p99 (ms) of the requests sent in each second since offset 0 (null: none sent). */
  readonly secondP99: readonly (number | null)[]
  readonly faults: readonly FaultSpan[]
  readonly violations: number
}

export interface Check {
  readonly name: string
  readonly pass: boolean
  readonly detail: string
}

export interface Growth {
  readonly pid: number
  readonly instance: number
  readonly from: number
  readonly to: number
  readonly growth: number
  readonly samples: number
}

export interface Recovery {
  readonly kind: string
  readonly instance?: number
  readonly healed: number
  /** ms from the heal until the per-second p99 was back within the bound (null: never). */
  readonly recoveryMs: number | null
}

export interface SoakVerdict {
  readonly pass: boolean
  readonly checks: readonly Check[]
  readonly rss: readonly Growth[]
  readonly handles: readonly Growth[]
  readonly timers: readonly Growth[]
  readonly storeConnections: { readonly from: number; readonly to: number } | undefined
  readonly steadyP99Max: number
  readonly recoveries: readonly Recovery[]
}

export const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? (sorted[middle] as number) : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2
}

/** Median of the first 3 against median of the last 3 values (at least 6 of them). */
function growthOf(values: readonly number[]): { from: number; to: number } | undefined {
  if (values.length < 6) return undefined
  return { from: median(values.slice(0, 3)), to: median(values.slice(-3)) }
}

const mb = (bytes: number) => `${(bytes / 1_048_576).toFixed(1)} MiB`

/** The processes judged for flatness: those that lived through 40 % of the time after the warm-up. */
function growths(input: SoakInput, value: (sample: ProcessSample) => number): Growth[] {
  const { warmupMs } = input.bounds
  const byPid = new Map<number, ProcessSample[]>()
  for (const sample of input.samples) {
    if (sample.t < warmupMs) continue
    const list = byPid.get(sample.pid) ?? []
    list.push(sample)
    byPid.set(sample.pid, list)
  }
  const span = input.durationMs - warmupMs
  const out: Growth[] = []
  for (const [pid, list] of byPid) {
    list.sort((a, b) => a.t - b.t)
    const lived = (list[list.length - 1]?.t ?? 0) - (list[0]?.t ?? 0)
    const range = growthOf(list.map(value))
    if (range === undefined || lived < 0.4 * span) continue
    out.push({ pid, instance: list[0]?.instance ?? 0, ...range, growth: range.to - range.from, samples: list.length })
  }
  return out.sort((a, b) => a.instance - b.instance || a.pid - b.pid)
}

export function recoveries(input: SoakInput): Recovery[] {
  const { p99Ms } = input.bounds
  const seconds = input.secondP99
  return input.faults.map((fault) => {
    let found: number | null = null
    for (let s = Math.floor(fault.end / 1_000); s + 4 < seconds.length; s++) {
      const run = seconds.slice(s, s + 5)
      if (run.every((p99) => p99 !== null && p99 !== undefined && p99 <= p99Ms)) {
        found = Math.max(0, s * 1_000 - fault.end)
        break
      }
    }
    return {
      kind: fault.kind,
      ...(fault.instance === undefined ? {} : { instance: fault.instance }),
      healed: fault.end,
      recoveryMs: found,
    }
  })
}

export function evaluate(input: SoakInput): SoakVerdict {
  const { bounds } = input
  const checks: Check[] = []
  checks.push({
    name: 'violations',
    pass: input.violations === 0,
    detail: `${input.violations} violations`,
  })

  const rss = growths(input, (sample) => sample.rss)
  const handles = growths(input, (sample) => sample.handles)
  const timers = growths(input, (sample) => sample.timers)
  checks.push({
    name: 'rss-flat',
    pass: rss.length > 0 && rss.every((growth) => growth.growth <= bounds.rssGrowth),
    detail:
      rss.length === 0
        ? 'no instance process lived long enough to judge'
        : `${rss.map((g) => `instance ${g.instance} pid ${g.pid}: ${mb(g.from)} → ${mb(g.to)} (${g.growth >= 0 ? '+' : ''}${mb(g.growth)})`).join('; ')}; bound +${mb(bounds.rssGrowth)}`,
  })
  for (const [name, list, bound] of [
    ['handles-flat', handles, bounds.handlesGrowth],
    ['timers-flat', timers, bounds.timersGrowth],
  ] as const)
    checks.push({
      name,
      pass: list.length > 0 && list.every((growth) => growth.growth <= bound),
      detail:
        list.length === 0
          ? 'no instance process lived long enough to judge'
          : `${list.map((g) => `instance ${g.instance} pid ${g.pid}: ${g.from} → ${g.to}`).join('; ')}; bound +${bound}`,
    })

  const connections = growthOf(
    input.store
      .filter((sample) => sample.t >= bounds.warmupMs && sample.connections !== null)
      .map((sample) => sample.connections as number),
  )
  checks.push({
    name: 'store-connections-flat',
    pass: connections !== undefined && connections.to - connections.from <= bounds.storeConnectionsGrowth,
    detail:
      connections === undefined
        ? 'too few samples of the store'
        : `${connections.from} → ${connections.to}; bound +${bounds.storeConnectionsGrowth}`,
  })

  const away = (start: number, end: number) =>
    input.faults.every((fault) => end <= fault.start || start >= fault.end + bounds.recoveryMs)
  const steady = input.windows.filter(
    (window) =>
      window.start >= bounds.warmupMs &&
      // The windows after the load's end hold only its last retries.
      window.start + 10_000 <= input.durationMs &&
      window.sent > 0 &&
      // A window's requests are judged by when they were sent, so a fault that begins within the
      // bound after the window's end can still hold one of them: such a window is not away. (A
      // request a later fault holds was already slower than the bound when the fault began.)
      away(window.start, window.start + 10_000 + bounds.p99Ms),
  )
  const over = steady.filter((window) => window.p99 > bounds.p99Ms)
  const steadyP99Max = Math.max(0, ...steady.map((window) => window.p99))
  checks.push({
    name: 'p99',
    pass: steady.length > 0 && over.length === 0,
    detail:
      steady.length === 0
        ? 'no 10 s window away from the faults after the warm-up'
        : `${steady.length} windows away from faults, highest p99 ${steadyP99Max} ms${over.length > 0 ? `, over the bound at ${over.map((window) => `${window.start / 1_000} s`).join(', ')}` : ''}; bound ${bounds.p99Ms} ms`,
  })

  const recovered = recoveries(input)
  const late = recovered.filter((r) => r.recoveryMs === null || r.recoveryMs > bounds.recoveryMs)
  checks.push({
    name: 'recovery',
    pass: late.length === 0,
    detail: `${recovered.map((r) => `${r.kind}${r.instance === undefined ? '' : ` i${r.instance}`} ${r.recoveryMs === null ? 'never' : `${(r.recoveryMs / 1_000).toFixed(0)} s`}`).join(', ') || 'no faults'}; bound ${bounds.recoveryMs / 1_000} s`,
  })
  return {
    pass: checks.every((check) => check.pass),
    checks,
    rss,
    handles,
    timers,
    storeConnections: connections,
    steadyP99Max,
    recoveries: recovered,
  }
}
