/**
 * The nemesis schedule, made from the seed alone: the same seed, store mode and duration give the
 * same faults at the same offsets (mulberry32, a small seeded PRNG). Faults do not overlap; each
 * heals within its window; none starts in the warm-up or the final quiet phase. Every third fault
 * (the 2nd, 5th, 8th, ...; an instant store fault keeps its slot, the next one is given instead)
 * is aimed at the payment service `/resumes` charges instead of the
 * store or the apps (PAYMENTS_KINDS, drawn from a second PRNG of the seed, so the other faults
 * stay what the seed drew before the payment service had faults of its own).
 */

/** mulberry32: a 32-bit seeded PRNG; `next()` is uniform in [0, 1). */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296
  }
}

export type StoreMode = 'redis' | 'postgres' | 'sentinel' | 'cluster' | 'postgres-ha'

export type FaultKind =
  /** SIGKILL of an app instance, restarted when the window ends. */
  | 'instance-kill'
  /** SIGSTOP of an app instance, SIGCONT when the window ends. */
  | 'instance-pause'
  /**
   * SIGSTOP of the store (on PostgreSQL the postmaster and every backend; on Sentinel the
   * master, which the sentinels may fail over), SIGCONT at the end.
   */
  | 'store-pause'
  /** Redis SIGKILL (append-only file, `appendfsync always`), restarted on the same port. */
  | 'store-kill'
  /** Sentinel: SIGKILL of the master; the sentinels promote the replica; the old master comes back as a replica. */
  | 'sentinel-failover'
  /** Sentinel: SIGKILL of the replica, restarted as a replica when the window ends. */
  | 'replica-kill'
  /** Cluster: slots move, with their keys, from one master to another under load (`redis-cli --cluster reshard`). */
  | 'reshard'
  /**
   * postgres-ha: the primary cut off (SIGSTOP, the router refusing), the synchronous standby
   * promoted, the router pointed at it, the old primary killed. Once per run, midway.
   */
  | 'promote'
  /** PostgreSQL immediate shutdown, restarted on the same port and data. */
  | 'pg-immediate'
  /** Redis SCRIPT FLUSH and FUNCTION FLUSH (instantaneous). */
  | 'script-flush'
  /** Redis CLIENT KILL TYPE normal: every client connection dropped (instantaneous). */
  | 'client-kill'
  /**
   * The store's wall clock (off the apps' by 20 s from the start, an `LD_PRELOAD` shim) stepped
   * by `stepMs`, halfway through the window stepped the other way, and back at the end.
   */
  | 'clock-step'
  /** One instance's proxy to the store holds every byte back by `delayMs`. */
  | 'proxy-latency'
  /** One instance's proxy applies the commands and drops the replies. */
  | 'proxy-drop'
  /** One instance's proxy swallows what the client sends (a half-open connection). */
  | 'proxy-half-open'
  /** One instance's proxy resets every connection: the instance is cut off from the store. */
  | 'partition'
  /**
   * The payment service's proxy (every instance reaches it through it) holds every byte back by
   * `delayMs`: a charge answered later than the caller's attempt timeout (3 s) is sent again,
   * with the same key.
   */
  | 'payments-latency'
  /**
   * The payment service's proxy passes the requests and drops the answers: the charge lands, the
   * caller never hears of it and sends it again with the same derived key.
   */
  | 'payments-drop'
  /** The payment service's proxy swallows what the callers send (a half-open connection). */
  | 'payments-half-open'
  /**
   * SIGSTOP of the payment service's process, SIGCONT when the window ends: its calls wait, the
   * callers' attempts time out and are sent again, other instances resume keys meanwhile.
   */
  | 'payments-pause'

export interface Fault {
  readonly kind: FaultKind
  /** Offset from the start of the load, ms. */
  readonly at: number
  /** How long until it heals, ms (0 for the instantaneous ones). */
  readonly durationMs: number
  /** The instance (0-2) for instance and proxy faults. */
  readonly instance?: number
  readonly delayMs?: number
  /** A clock step's first step, ms: ahead when positive, back when negative (1-6 s). */
  readonly stepMs?: number
}

/**
 * The faults aimed at the payment service (examples/payments-app.ts) in every store mode: every
 * third fault of a schedule. They excuse nothing on the other routes (checker.ts).
 */
export const PAYMENTS_KINDS: readonly FaultKind[] = [
  'payments-latency',
  'payments-drop',
  'payments-half-open',
  'payments-pause',
]

/**
 * Each store mode's menu of faults on the store and the apps; the soak run (test/soak/run.ts)
 * draws from it too (it runs no payment service: PAYMENTS_KINDS are not in it).
 */
export const KINDS: Readonly<Record<StoreMode, readonly FaultKind[]>> = {
  redis: [
    'instance-kill',
    'instance-pause',
    'store-pause',
    'store-kill',
    'script-flush',
    'client-kill',
    'proxy-latency',
    'proxy-drop',
    'proxy-half-open',
    'partition',
    'clock-step',
  ],
  // The apps reach the nodes at the addresses the sentinels give: no proxy in between.
  sentinel: [
    'instance-kill',
    'instance-pause',
    'store-pause',
    'sentinel-failover',
    'replica-kill',
    'script-flush',
    'client-kill',
    'clock-step',
  ],
  // The apps reach the nodes at the addresses the cluster gives: no proxy in between.
  cluster: ['instance-kill', 'instance-pause', 'store-pause', 'reshard', 'script-flush', 'client-kill', 'clock-step'],
  // Through the router to the primary now; the promotion is placed midway (below).
  'postgres-ha': [
    'instance-kill',
    'instance-pause',
    'proxy-latency',
    'proxy-drop',
    'proxy-half-open',
    'partition',
    'clock-step',
  ],
  postgres: [
    'instance-kill',
    'instance-pause',
    'store-pause',
    'pg-immediate',
    'proxy-latency',
    'proxy-drop',
    'proxy-half-open',
    'partition',
    'clock-step',
  ],
}

/** The faults that happen at once, with no window to heal. */
export const INSTANT: ReadonlySet<FaultKind> = new Set(['script-flush', 'client-kill'])

export interface ScheduleOptions {
  readonly seed: number
  readonly store: StoreMode
  /** The whole load, ms: warm-up, faults, quiet phase. */
  readonly durationMs: number
  readonly warmupMs?: number
  readonly quietMs?: number
  readonly instances?: number
}

/** The faults of one run, in time order. */
export function makeSchedule(options: ScheduleOptions): Fault[] {
  const { seed, store, durationMs, warmupMs = 3_000, quietMs = 12_000, instances = 3 } = options
  const random = mulberry32(seed)
  // The payment service's faults from a PRNG of their own: the draws above stay as they were.
  const paymentsRandom = mulberry32(seed ^ 0x5eed_face)
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T
  const between = (low: number, high: number) => Math.round(low + random() * (high - low))
  const end = durationMs - quietMs
  const faults: Fault[] = []
  const nodes = store === 'cluster' ? 3 : 1
  let at = warmupMs + between(0, 1_000)
  // The next fault due to be the payment service's (an instant store fault keeps its slot).
  let paymentsDue = 1
  while (at < end) {
    const drawn = pick(KINDS[store])
    const durationMs = INSTANT.has(drawn) ? 0 : Math.min(between(1_500, 6_000), end - at)
    if (durationMs < 0 || (!INSTANT.has(drawn) && durationMs < 500)) break
    // On a cluster, `instance` of a store fault is the node (0-2); a reshard moves from it to the next.
    const targeted =
      drawn.startsWith('instance') ||
      drawn.startsWith('proxy') ||
      drawn === 'partition' ||
      (nodes > 1 && ['store-pause', 'reshard', 'client-kill'].includes(drawn))
    const instance = targeted ? between(0, instances - 1) : undefined
    const delayMs = drawn === 'proxy-latency' ? between(50, 400) : undefined
    const stepMs = drawn === 'clock-step' ? (random() < 0.5 ? -1 : 1) * between(1_000, 6_000) : undefined
    if (faults.length >= paymentsDue && durationMs > 0) {
      const kind = PAYMENTS_KINDS[Math.floor(paymentsRandom() * PAYMENTS_KINDS.length)] as FaultKind
      // Past the callers' attempt timeout (3 s) now and then: the charge is sent again.
      const delay = Math.round(200 + paymentsRandom() * 3_800)
      faults.push({ kind, at, durationMs, ...(kind === 'payments-latency' ? { delayMs: delay } : {}) })
      paymentsDue = faults.length + 2
    } else {
      faults.push({
        kind: drawn,
        at,
        durationMs,
        ...(instance === undefined ? {} : { instance }),
        ...(delayMs === undefined ? {} : { delayMs }),
        ...(stepMs === undefined ? {} : { stepMs }),
      })
    }
    at += durationMs + between(1_000, 3_000)
  }
  if (store === 'postgres-ha' && faults.length > 0) {
    // The fault nearest the middle of the faults' span becomes the promotion.
    const middle = (warmupMs + end) / 2
    const index = faults.reduce(
      (best, fault, i) => (Math.abs(fault.at - middle) < Math.abs((faults[best]?.at ?? 0) - middle) ? i : best),
      0,
    )
    const chosen = faults[index] as Fault
    faults[index] = { kind: 'promote', at: chosen.at, durationMs: chosen.durationMs }
  }
  return faults
}
