/**
 * The soak run's pass/fail over synthetic samples: flat passes; RSS or handles growing, a p99
 * over its bound away from the faults, a recovery that never comes, a violation, each fails.
 */
import { describe, expect, it } from 'vitest'
import { PAYMENTS_KINDS } from '../nemesis/schedule.js'
import { evaluate, ownHandles, type ProcessSample, type SoakBounds, type SoakInput } from './evaluate.js'
import { MENU, soakSchedule } from './run.js'

const MIB = 1_048_576
const bounds: SoakBounds = {
  warmupMs: 120_000,
  p99Ms: 250,
  recoveryMs: 30_000,
  rssGrowth: 64 * MIB,
  handlesGrowth: 10,
  timersGrowth: 100,
  storeConnectionsGrowth: 10,
}
const durationMs = 600_000
const faults = [60_000, 180_000, 300_000, 420_000].map((start) => ({ kind: 'store-pause', start, end: start + 5_000 }))

/** Three processes sampled every 10 s; `rss` and `handles` of the sample at offset t. */
function input(
  rss: (t: number) => number = () => 150 * MIB,
  handles: (t: number) => number = () => 38,
  p99: (second: number) => number = (second) =>
    faults.some((fault) => second * 1_000 >= fault.start && second * 1_000 < fault.end + 3_000) ? 2_000 : 40,
): SoakInput {
  const samples: ProcessSample[] = []
  for (let t = 10_000; t <= durationMs; t += 10_000)
    for (let instance = 0; instance < 3; instance++)
      samples.push({
        t,
        pid: 100 + instance,
        instance,
        // A little noise, as real samples have.
        rss: rss(t) + ((t / 10_000 + instance) % 3) * MIB,
        handles: handles(t) + ((t / 10_000) % 4),
        // Timers come and go with the requests in flight.
        timers: 20 + (((t / 10_000) * 37) % 80),
      })
  const secondP99 = Array.from({ length: durationMs / 1_000 }, (_, second) => p99(second))
  const windows = Array.from({ length: durationMs / 10_000 }, (_, i) => ({
    start: i * 10_000,
    p99: Math.max(...secondP99.slice(i * 10, i * 10 + 10)),
    sent: 15_000,
  }))
  return {
    durationMs,
    bounds,
    samples,
    store: samples.filter((sample) => sample.instance === 0).map(({ t }) => ({ t, connections: 6 })),
    windows,
    secondP99,
    faults,
    violations: 0,
  }
}

const failed = (verdict: ReturnType<typeof evaluate>) =>
  verdict.checks.filter((check) => !check.pass).map((check) => check.name)

describe('the soak verdict', () => {
  it('passes flat samples, a p99 within its bound away from faults and quick recoveries', () => {
    const flat = input()
    // A window after the load's end holds only its last retries: not judged.
    const verdict = evaluate({ ...flat, windows: [...flat.windows, { start: durationMs, p99: 5_000, sent: 40 }] })
    expect(failed(verdict)).toEqual([])
    expect(verdict.pass).toBe(true)
    expect(verdict.rss).toHaveLength(3)
    expect(verdict.recoveries.map((r) => r.recoveryMs)).toEqual([3_000, 3_000, 3_000, 3_000])
  })

  it('fails an RSS that grows after the warm-up, not one that grows only during it', () => {
    const leaking = evaluate(input((t) => 150 * MIB + (t / 1_000) * 0.2 * MIB))
    expect(failed(leaking)).toEqual(['rss-flat'])
    const warming = evaluate(input((t) => (t < 120_000 ? 50 * MIB + t * 800 : 150 * MIB)))
    expect(failed(warming)).toEqual([])
  })

  it('fails handles that keep growing, and timers that grow past what the requests in flight explain', () => {
    expect(failed(evaluate(input(undefined, (t) => 38 + Math.floor(t / 10_000))))).toEqual(['handles-flat'])
    const base = input()
    const leaking = base.samples.map((sample) => ({ ...sample, timers: sample.timers + Math.floor(sample.t / 1_000) }))
    expect(failed(evaluate({ ...base, samples: leaking }))).toEqual(['timers-flat'])
  })

  it("judges an instance's own handles: the load's keep-alive sockets coming and going with the faults are left out", () => {
    expect(ownHandles({ TCPServerWrap: 1, TCPSocketWrap: 30, Timeout: 12, PipeWrap: 2 }, 24)).toBe(9)
    // The load's pool: 11 sockets while it is idle, up to 42 while a fault holds its requests,
    // and at the end of the run one of those peaks (as the PostgreSQL soak saw).
    const pool = (t: number) => (t >= 560_000 || (t >= 60_000 && t < 100_000) ? 42 : 11)
    const resources = (t: number) => ({ TCPServerWrap: 1, TCPSocketWrap: 6 + pool(t), PipeWrap: 2, Timeout: 30 })
    expect(failed(evaluate(input(undefined, (t) => ownHandles(resources(t), pool(t)))))).toEqual([])
    // Counted with the load's sockets, the same process fails.
    expect(failed(evaluate(input(undefined, (t) => ownHandles(resources(t)))))).toEqual(['handles-flat'])
    // A store connection leaking among them still does.
    const leak = (t: number) =>
      ownHandles({ ...resources(t), TCPSocketWrap: 6 + pool(t) + Math.floor(t / 30_000) }, pool(t))
    expect(failed(evaluate(input(undefined, leak)))).toEqual(['handles-flat'])
  })

  it('fails a p99 over its bound away from the faults, and a recovery that never comes', () => {
    const slow = evaluate(input(undefined, undefined, (second) => (second >= 500 && second < 510 ? 400 : 40)))
    expect(failed(slow)).toEqual(['p99'])
    // The window before a fault: its last requests are still in flight when the fault begins and
    // are answered late by it, so it is not judged; one that ends longer than the bound before a
    // fault is.
    const cut = evaluate(input(undefined, undefined, (second) => (second >= 170 && second < 180 ? 400 : 40)))
    expect(failed(cut)).toEqual([])
    const before = evaluate(input(undefined, undefined, (second) => (second >= 160 && second < 170 ? 400 : 40)))
    expect(failed(before)).toEqual(['p99'])
    const stuck = evaluate(input(undefined, undefined, (second) => (second >= 420 ? 2_000 : 40)))
    expect(failed(stuck)).toContain('recovery')
    expect(stuck.recoveries.at(-1)?.recoveryMs).toBe(null)
  })

  it('fails on a violation, and when no process lived long enough to judge', () => {
    expect(failed(evaluate({ ...input(), violations: 1 }))).toEqual(['violations'])
    const short = input()
    const judged = evaluate({ ...short, samples: short.samples.filter((sample) => sample.t < 200_000) })
    expect(failed(judged)).toEqual(['rss-flat', 'handles-flat', 'timers-flat'])
  })
})

describe('the soak schedule', () => {
  it('applies one fault a minute, every kind of the menu once a round, and never kills instance 0', () => {
    const schedule = soakSchedule('redis', 60 * 60_000, 60_000, 30_000, 1)
    expect(schedule).toHaveLength(59)
    expect(schedule.map((fault) => fault.at)).toEqual(schedule.map((_, i) => (i + 1) * 60_000))
    expect(new Set(schedule.slice(0, 10).map((fault) => fault.kind))).toEqual(new Set(MENU.redis))
    const kills = schedule.filter((fault) => fault.kind === 'instance-kill')
    expect(kills.length).toBeGreaterThan(0)
    expect(kills.every((fault) => fault.instance !== 0)).toBe(true)
    expect(soakSchedule('postgres', 10 * 60_000, 60_000, 30_000, 1).map((fault) => fault.kind)).not.toContain(
      'store-kill',
    )
    // The soak runs no payment service: none of its faults is on the menu.
    for (const store of ['redis', 'postgres'] as const)
      for (const fault of soakSchedule(store, 60 * 60_000, 60_000, 30_000, 1))
        expect(PAYMENTS_KINDS).not.toContain(fault.kind)
  })
})
