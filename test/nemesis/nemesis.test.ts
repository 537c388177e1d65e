/**
 * The nemesis's own rules for a fault delayed into the quiet phase, with real proxies: any fault,
 * the store's or the payment service's, is cut to what is left (0.5 s or more) and healed when
 * the quiet phase begins, and skipped when less is left; a run without a payment service refuses
 * its faults.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import type { Deployment } from './deployments/index.js'
import { type NemesisPlan, runFaults } from './nemesis.js'
import type { Fault } from './schedule.js'

const opened: TcpProxy[] = []
afterEach(async () => {
  for (const proxy of opened.splice(0)) await proxy.close()
})

/** A proxy (to a port nothing listens on: no byte goes through) whose modes are recorded. */
async function proxy(): Promise<{ proxy: TcpProxy; modes: string[] }> {
  const real = await startTcpProxy(1)
  opened.push(real)
  const modes: string[] = []
  const setMode = real.setMode.bind(real)
  real.setMode = (mode, options) => {
    modes.push(mode)
    setMode(mode, options)
  }
  return { proxy: real, modes }
}

async function plan(schedule: Fault[], loadEnd: number, withPayments = true) {
  const store = await proxy()
  const payments = await proxy()
  const origin = Date.now()
  const lines: string[] = []
  const faults: NemesisPlan = {
    schedule,
    instances: [],
    proxies: [store.proxy],
    deployment: { faults: {} } as unknown as Deployment,
    ...(withPayments ? { payments: { pid: process.pid, proxy: payments.proxy } } : {}),
    mode: 'redis',
    loadEnd,
    now: () => Date.now() - origin,
    startInstance: () => Promise.reject(new Error('no instance is killed here')),
    saveOutput: () => {},
    log: (line) => lines.push(line),
  }
  return { faults, store, payments, lines }
}

describe('nemesis: faults delayed into the quiet phase', () => {
  it.for([
    ['proxy-latency', 'store', 'delay'],
    ['payments-drop', 'payments', 'drop-replies'],
  ] as const)('cuts a %s to what is left and heals it when the quiet phase begins', async ([kind, target, mode]) => {
    const fault: Fault =
      kind === 'proxy-latency'
        ? { kind, at: 0, durationMs: 2_000, instance: 0, delayMs: 10 }
        : { kind, at: 0, durationMs: 2_000 }
    const run = await plan([fault], 900)
    const applied = await runFaults(run.faults)
    expect(run[target].modes).toEqual([mode, 'pass'])
    expect(run[target === 'store' ? 'payments' : 'store'].modes).toEqual([])
    expect(applied.map((each) => each.kind)).toEqual([kind])
    const [cut] = applied
    expect(cut?.end ?? Infinity).toBeLessThanOrEqual(900 + 100)
    expect((cut?.end ?? 0) - (cut?.start ?? 0)).toBeGreaterThanOrEqual(500)
    expect(run.lines.join('\n')).toMatch(new RegExp(`${kind} cut to \\d+ ms`))
  })

  it("skips any fault when less than 0.5 s is left, and refuses the payment service's in a run without one", async () => {
    const short = await plan(
      [
        { kind: 'proxy-half-open', at: 0, durationMs: 2_000, instance: 0 },
        { kind: 'payments-half-open', at: 0, durationMs: 2_000 },
      ],
      300,
    )
    expect(await runFaults(short.faults)).toEqual([])
    expect(short.store.modes).toEqual([])
    expect(short.payments.modes).toEqual([])
    expect(short.lines.join('\n')).toMatch(/proxy-half-open skipped[\s\S]*payments-half-open skipped/)
    const none = await plan([{ kind: 'payments-latency', at: 0, durationMs: 200, delayMs: 100 }], 5_000, false)
    await expect(runFaults(none.faults)).rejects.toThrow('this run has no payment service')
  })
})
