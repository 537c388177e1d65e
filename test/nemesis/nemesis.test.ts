/**
 * The nemesis's own rules for a fault delayed into the quiet phase, with real proxies: a fault
 * of the store or the apps is skipped, one of the payment service's is cut to what is left (0.5 s
 * or more) and healed when the quiet phase begins; a run without a payment service refuses its
 * faults.
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
  it("skips the store's, cuts the payment service's to what is left", async () => {
    const { faults, store, payments, lines } = await plan(
      [
        { kind: 'proxy-latency', at: 0, durationMs: 2_000, instance: 0, delayMs: 10 },
        { kind: 'payments-drop', at: 0, durationMs: 2_000 },
      ],
      900,
    )
    const applied = await runFaults(faults)
    expect(store.modes).toEqual([])
    expect(payments.modes).toEqual(['drop-replies', 'pass'])
    expect(applied.map((fault) => fault.kind)).toEqual(['payments-drop'])
    const [drop] = applied
    expect(drop?.end ?? Infinity).toBeLessThanOrEqual(900 + 100)
    expect((drop?.end ?? 0) - (drop?.start ?? 0)).toBeGreaterThanOrEqual(500)
    expect(lines.join('\n')).toMatch(/proxy-latency skipped[\s\S]*payments-drop cut to \d+ ms/)
  })

  it("skips the payment service's too when less than 0.5 s is left, and refuses it in a run without one", async () => {
    const short = await plan([{ kind: 'payments-half-open', at: 0, durationMs: 2_000 }], 300)
    expect(await runFaults(short.faults)).toEqual([])
    expect(short.payments.modes).toEqual([])
    const none = await plan([{ kind: 'payments-latency', at: 0, durationMs: 200, delayMs: 100 }], 5_000, false)
    await expect(runFaults(none.faults)).rejects.toThrow('this run has no payment service')
  })
})
