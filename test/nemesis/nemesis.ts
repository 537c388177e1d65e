/**
 * The nemesis of a run (run.ts): each fault of the schedule at its offset, healed at the end of
 * its window. The app instances' faults (killed and restarted, paused), their proxies' (latency,
 * dropped replies, half-open, partition) and the payment service's (its proxy's latency, dropped
 * answers and half-open connections; its process paused) are applied here; the store's own faults by
 * the deployment (deployments/, one file per store mode).
 */
import type { AppProcess } from '../helpers/app-process.js'
import type { TcpProxy } from '../helpers/tcp-proxy.js'
import type { Deployment } from './deployments/index.js'
import type { AppliedFault } from './history.js'
import type { Fault } from './schedule.js'
import { sleep } from './traffic.js'

/** An app instance's life: when it started, was killed, was paused (ms since the load began). */
export interface Life {
  instance: number
  pid: number
  started: number
  killed?: number
  paused: { start: number; end: number }[]
}

/** An app instance of the run: its process (none while killed), its URL and its life. */
export interface Instance {
  app: AppProcess | undefined
  url: string
  life: Life
}

export interface NemesisPlan {
  readonly schedule: readonly Fault[]
  readonly instances: Instance[]
  readonly proxies: readonly TcpProxy[]
  readonly deployment: Deployment
  /**
   * The payment service `/resumes` charges: its process and the proxy every instance reaches it
   * through (absent where none runs, as in the soak: its faults are then refused).
   */
  readonly payments?: { readonly pid: number; readonly proxy: TcpProxy }
  /** The store mode, for the error of a fault its deployment does not apply. */
  readonly mode: string
  /** When the load ends: a fault that would not heal by then is skipped. */
  readonly loadEnd: number
  now(): number
  /** Starts instance `i` again (after a kill). */
  startInstance(i: number): Promise<Instance>
  /** Keeps what a killed app process wrote. */
  saveOutput(app: AppProcess | undefined, pid: number): void
  log(line: string): void
}

/** The shortest window a fault delayed into the quiet phase is cut to, ms; shorter: skipped. */
const MIN_CUT_MS = 500

/** Applies the schedule's faults in order; resolves to the faults applied, as they were. */
export async function runFaults(plan: NemesisPlan): Promise<AppliedFault[]> {
  const { schedule, instances, proxies, deployment, now, log } = plan
  const applied: AppliedFault[] = []
  for (const planned of schedule) {
    await sleep(planned.at - now())
    // Every fault heals before the quiet phase. One delayed (by the one before, an instance's
    // restart, or by a timer that fired late on a loaded machine) so that it would reach into
    // the quiet phase is cut to what is left, if that is 0.5 s or more, and skipped otherwise:
    // the last fault's window often ends where the quiet phase begins, and in a short seed it
    // may be the one fault of its kind the seed is there to run.
    let fault = planned
    const left = plan.loadEnd - now()
    if (fault.durationMs > left) {
      if (left < MIN_CUT_MS) {
        log(`  fault ${fault.kind} skipped: it would not heal before the quiet phase`)
        continue
      }
      fault = { ...fault, durationMs: left }
      log(`  fault ${fault.kind} cut to ${left} ms: the quiet phase begins then`)
    }
    const start = now()
    const i = fault.instance ?? 0
    const target = instances[i] as Instance
    let detail: string | undefined
    switch (fault.kind) {
      case 'instance-kill': {
        target.life.killed = now()
        await target.app?.stop('SIGKILL')
        plan.saveOutput(target.app, target.life.pid)
        target.app = undefined
        await sleep(fault.durationMs)
        const next = await plan.startInstance(i)
        target.app = next.app
        target.url = next.url
        target.life = next.life
        break
      }
      case 'instance-pause': {
        process.kill(target.life.pid, 'SIGSTOP')
        await sleep(fault.durationMs)
        process.kill(target.life.pid, 'SIGCONT')
        target.life.paused.push({ start, end: now() })
        break
      }
      case 'proxy-latency':
      case 'proxy-drop':
      case 'proxy-half-open':
      case 'partition':
      case 'payments-latency':
      case 'payments-drop':
      case 'payments-half-open': {
        // An instance's proxy to the store, or the payment service's, which every instance calls through.
        const proxy = fault.kind.startsWith('payments') ? plan.payments?.proxy : proxies[i]
        if (proxy === undefined) throw new Error(`${fault.kind}: this run has no payment service`)
        const proxyMode = {
          'proxy-latency': 'delay',
          'proxy-drop': 'drop-replies',
          'proxy-half-open': 'blackhole',
          partition: 'cut',
          'payments-latency': 'delay',
          'payments-drop': 'drop-replies',
          'payments-half-open': 'blackhole',
        } as const
        proxy.setMode(proxyMode[fault.kind], { delayMs: fault.delayMs ?? 0 })
        if (fault.delayMs !== undefined) detail = `${fault.delayMs} ms`
        await sleep(fault.durationMs)
        proxy.setMode('pass')
        break
      }
      case 'payments-pause': {
        const pid = plan.payments?.pid
        if (pid === undefined) throw new Error(`${fault.kind}: this run has no payment service`)
        process.kill(pid, 'SIGSTOP')
        try {
          await sleep(fault.durationMs)
        } finally {
          process.kill(pid, 'SIGCONT')
        }
        break
      }
      default: {
        const apply = deployment.faults[fault.kind]
        if (apply === undefined) throw new Error(`the ${plan.mode} deployment has no fault ${fault.kind}`)
        detail = await apply({ fault, instance: i, start, now })
      }
    }
    const end = now()
    applied.push({
      kind: fault.kind,
      start,
      end,
      ...(fault.instance === undefined ? {} : { instance: i }),
      ...(fault.delayMs !== undefined ? { delayMs: fault.delayMs } : {}),
      ...(detail ? { detail } : {}),
    })
    log(
      `  fault ${fault.kind}${fault.instance === undefined ? '' : ` on instance ${i}`} ${start}–${end} ms${detail ? ` (${detail})` : ''}`,
    )
  }
  return applied
}
