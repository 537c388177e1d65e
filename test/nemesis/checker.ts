/**
 * The nemesis checker: offline, from a run's history, the apps' execution log and (on
 * PostgreSQL) the deposit rows, it checks the guarantees of docs/guarantees.md per key:
 *
 * Keys are checked per principal: one key string sent by two principals is two keys (a key's
 * identity is its principal and its string). Each route is held to its own rules (routes.ts).
 *
 * - `duplicate-execution`: on a `recover` route the order handler ran at most once per key (no
 *   documented re-run exists; a deposit may run again after its transaction rolled back, so
 *   there the rows are counted instead); on a `takeover` route it may run again after a
 *   takeover, each run with a fencing token of its own, so two runs with one token are the
 *   violation; on a `resume` route the same (a resumed run re-runs by design, with the next
 *   token);
 * - `run-after-answer`: no key answered 2xx ran its handler again afterwards (on a takeover or
 *   resume route a stale owner's run that starts late, with a token below one that ran before
 *   the answer, is fenced: a limit, counted with its reason);
 * - `different-answers`: every 2xx answer for a key has the same body, byte for byte (after a
 *   takeover: the stale owner's completion was refused, not stored over the new owner's);
 * - `lost-answer`: after a key was answered 2xx, a retry with the same body never gets 409,
 *   422 or 503 recovery-required (the completed record is there; Redis runs with `appendfsync
 *   always`);
 * - `same-body-rejected`: a request whose body was never changed is never answered 422 (its
 *   key was never used with another body by that principal);
 * - `early-409`: on an `inFlight: { waitMs }` route a 409 comes only after the request waited
 *   `waitMs` (less a slack), unless a fault was active meanwhile;
 * - `changed-body-accepted`: a changed body under a used key is answered 422 (or 503
 *   store-unavailable, or nothing), never 2xx;
 * - `foreign-answer`: no key is answered 2xx with another key's answer (every answer here
 *   carries a new id, so two keys never share a body): one key's stored response handed out
 *   under another key, or another principal's;
 * - `undocumented-status`: every answer is a documented one (201, 409 in-flight, 422
 *   key-reused, 503 store-unavailable or recovery-required, or the app's own 503 for a deposit
 *   whose write failed and rolled back): no 500, no other status;
 * - `hang`: no answer later than `boundMs`, and no request without an answer, unless its
 *   instance was paused or killed meanwhile;
 * - `unsettled`: after the quiet phase every key's probe finds it completed (2xx) or
 *   recovery-required with a reason (an instance that held it was killed, or one of its
 *   answers was lost to a fault); anything else, or recovery-required with no reason;
 * - deposits (exactly once): `deposit-rows` (at most one row per key, exactly one for a key
 *   answered 2xx, none for a key that never completed) and `balance` (each account's balance
 *   is the sum of one deposit per key answered 2xx);
 * - the downstream effect of `/resumes` (the payment service's charges, whose customer is the
 *   key's identity): `double-charge` (at most one charge per key, however often its handler
 *   ran), `missing-charge` (a key answered 2xx has its charge) and `wrong-charge` (every 2xx
 *   answer names the key's one charge). On a `resume` route a key is never left
 *   recovery-required by a killed or stalled run (the next retry resumes it): there that state
 *   is `unsettled` whatever the faults.
 *
 * Documented limits are counted beside the violations, in `limits`, with their reason, never
 * silently: a key recovery-required for a documented reason (an execution whose effect is
 * unknown: docs/errors.md), and, where the run says Redis fails over without `durability`
 * (`unsafeFailover`), a key whose answer a failover lost (docs/guarantees.md: a failover loses
 * acknowledged writes) instead of its `lost-answer`, `different-answers`, `run-after-answer` or
 * `duplicate-execution`.
 */
import { type ClockReport, clockWindows } from './clock-windows.js'
import type {
  AppliedFault,
  BalanceRow,
  Charge,
  DepositRow,
  Execution,
  InstanceLife,
  Operation,
  ResumeOrderRow,
  StepLine,
} from './history.js'
import { ROUTE_RULES } from './routes.js'
import { PAYMENTS_KINDS } from './schedule.js'

export interface CheckInput {
  readonly operations: readonly Operation[]
  readonly executions: readonly Execution[]
  readonly instances: readonly InstanceLife[]
  readonly faults: readonly AppliedFault[]
  /** Epoch ms of offset 0 (the execution log's times are epoch ms). */
  readonly origin: number
  /** The longest a request may wait for a documented answer, ms. */
  readonly boundMs: number
  /** Each key's record after the probes (state, attempt, rev), as the store holds it. */
  readonly records?: Readonly<Record<string, object>>
  readonly deposits?: readonly DepositRow[]
  readonly balances?: readonly BalanceRow[]
  /** The payment service's charges after the run (absent: the downstream is not checked). */
  readonly charges?: readonly Charge[]
  /** On PostgreSQL, `/resumes`'s charge steps as each run logged them (absent: none checked). */
  readonly steps?: readonly StepLine[]
  /** On PostgreSQL, `/resumes`'s order rows (absent: not checked). */
  readonly resumeOrders?: readonly ResumeOrderRow[]
  /**
   * Redis fails over (Sentinel) without `durability`: a failover may lose acknowledged writes
   * (docs/guarantees.md), so what that loses is a limit, counted with its reason.
   */
  readonly unsafeFailover?: boolean
}

export type ViolationKind =
  | 'duplicate-execution'
  | 'run-after-answer'
  | 'different-answers'
  | 'lost-answer'
  | 'same-body-rejected'
  | 'early-409'
  | 'changed-body-accepted'
  | 'foreign-answer'
  | 'undocumented-status'
  | 'hang'
  | 'unsettled'
  | 'deposit-rows'
  | 'balance'
  | 'double-charge'
  | 'missing-charge'
  | 'wrong-charge'
  | 'step-rerun'
  | 'step-result'
  | 'resume-rows'

export interface Violation {
  readonly kind: ViolationKind
  readonly key: string
  /** The principal that sent the key (absent for an account's balance). */
  readonly user?: string
  readonly detail: string
}

/** A key's identity: its principal and its string (a key string is one key per principal). */
export const identity = (user: string, key: string) => `${user}/${key}`

export type FinalState = 'completed' | 'recovery-required' | 'unsettled' | 'not-probed'

export interface CheckReport {
  readonly operations: number
  readonly keys: number
  readonly executions: number
  readonly answers: Record<string, number>
  readonly faults: Record<string, number>
  readonly finalStates: Record<string, number>
  /** Why each recovery-required key is in that state, counted. */
  readonly recoveryReasons: Record<string, number>
  /** Documented limits met, by reason: not violations, and not silent. */
  readonly limits: Record<string, number>
  /**
   * Per route: keys, handler executions, keys taken over or resumed (run again), duplicates that
   * waited and got the replay.
   */
  readonly routes: Record<string, { keys: number; executions: number; takenOver: number; waitedReplays: number }>
  /**
   * The downstream effects of the `resume` routes: the payment service's charges, the keys sent
   * there, those with a charge, those whose handler ran more than once, and of those the ones
   * whose run was in a process SIGKILLed before the next run began.
   */
  readonly downstream: {
    charges: number
    keys: number
    chargedKeys: number
    resumedKeys: number
    resumedAfterKill: number
    /**
     * On PostgreSQL, the charge's recovery points: runs that called the payment service and
     * committed the charge as a step, re-runs that found it committed and skipped the call, and
     * of those the ones after a run of the key was SIGKILLed.
     */
    stepsRun: number
    stepsSkipped: number
    stepsSkippedAfterKill: number
  }
  readonly violations: readonly Violation[]
  readonly violationsByKind: Record<string, number>
  /** The first violating key's operations and executions, as text. */
  readonly firstViolation?: string
  /** The store's clock steps and the 409 windows they caused (clock-windows.ts), when a step was applied. */
  readonly clock?: ClockReport
}

/** How an answer is counted and drawn: 201, replay, 409, 422, 503 (either code), timeout. */
export function answerLabel(operation: Operation): string {
  if (operation.outcome === 'timeout') return 'timeout'
  if (operation.outcome === 'error') return 'error'
  if (operation.status >= 200 && operation.status < 300) return operation.replayed ? 'replay' : String(operation.status)
  if (operation.status === 503 && operation.code === 'IDEMPOTENCY_RECOVERY_REQUIRED') return '503 recovery'
  if (operation.status === 503 && operation.code === 'HANDLER_RETRYABLE') return '503 handler'
  if (operation.status === 503) return '503 unavailable'
  return String(operation.status)
}

const DOCUMENTED: Record<number, readonly string[]> = {
  409: ['IDEMPOTENCY_IN_FLIGHT'],
  422: ['IDEMPOTENCY_KEY_REUSED'],
  // HANDLER_RETRYABLE: the app's own 503 when a deposit's write failed (its transaction rolled back),
  // a charge went unanswered, or on PostgreSQL a charge step or order row did not commit.
  503: ['IDEMPOTENCY_STORE_UNAVAILABLE', 'IDEMPOTENCY_RECOVERY_REQUIRED', 'HANDLER_RETRYABLE'],
}

const is2xx = (operation: Operation) =>
  operation.outcome === 'answer' && operation.status >= 200 && operation.status < 300
const count = (into: Record<string, number>, name: string) => {
  into[name] = (into[name] ?? 0) + 1
}

/** True when `instance` was paused or killed (or not yet restarted) at some time in [start, end]. */
function disturbed(instances: readonly InstanceLife[], instance: number, start: number, end: number): boolean {
  const lives = instances.filter((life) => life.instance === instance)
  for (const life of lives) {
    if (life.killed !== undefined && life.killed >= start - 50 && life.killed <= end + 50) return true
    if (life.paused.some((pause) => pause.start <= end + 50 && pause.end >= start - 50)) return true
  }
  // Down between a kill and the next start.
  const alive = lives.some((life) => life.started <= start && (life.killed === undefined || life.killed >= end))
  return !alive
}

/**
 * How long an undecided claim may take to be settled once the store answers its instance again:
 * the settling retries with a backoff of at most 5 s (docs/guarantees.md), and the store may take
 * as long again to answer a reconnected client.
 */
const UNDECIDED_SETTLE_MS = 10_000

/** Faults that keep the store from answering an instance (all of them, or the one named). */
const STORE_OUT_OF_REACH: ReadonlySet<string> = new Set([
  'store-pause',
  'store-kill',
  'sentinel-failover',
  'pg-immediate',
  'promote',
  'partition',
  'proxy-drop',
  'proxy-half-open',
])

/**
 * True when the process of `instance` that answered at `at` was SIGKILLed before it could
 * settle an undecided claim: within UNDECIDED_SETTLE_MS of the answer, or of the end of a fault
 * that kept the store out of its reach from the answer on.
 */
function killedBeforeSettling(
  instances: readonly InstanceLife[],
  faults: readonly AppliedFault[],
  instance: number,
  at: number,
): boolean {
  const life = instances.find(
    (candidate) => candidate.instance === instance && candidate.started <= at && (candidate.killed ?? Infinity) >= at,
  )
  const killed = life?.killed
  if (killed === undefined) return false
  let reachableFrom = at
  for (const fault of faults) {
    const reaches = fault.instance === undefined || fault.instance === instance
    if (
      reaches &&
      STORE_OUT_OF_REACH.has(fault.kind) &&
      fault.start <= reachableFrom + 50 &&
      fault.end > reachableFrom
    ) {
      reachableFrom = fault.end
    }
  }
  return killed <= reachableFrom + UNDECIDED_SETTLE_MS
}

/** The pids that were SIGKILLed. */
function killedPids(instances: readonly InstanceLife[]): Set<number> {
  return new Set(instances.filter((life) => life.killed !== undefined).map((life) => life.pid))
}

/** Faults during which Redis fails over: what the old master acknowledged may be gone. */
const FAILOVERS: ReadonlySet<string> = new Set(['sentinel-failover', 'store-pause'])
/** The violations a failover without `durability` may cause (docs/guarantees.md). */
const FAILOVER_LOSSES: ReadonlySet<ViolationKind> = new Set([
  'lost-answer',
  'different-answers',
  'run-after-answer',
  'duplicate-execution',
  'same-body-rejected',
])
/** How much sooner than `waitMs` a 409 of a waiting route may come (timers, a loaded machine). */
const WAIT_SLACK_MS = 250

/**
 * How much longer a `/resumes` handler may have run than `boundMs` allows for: its calls of the
 * payment service wait out that service's injected latency, which is the handler's own time, not
 * the layer's. For each `payments-latency` fault the operation overlapped: the overlap and the
 * fault's delay (`delayMs`), for a call sent at the end of the window.
 */
function downstreamDelay(operation: Operation, faults: readonly AppliedFault[]): number {
  if (operation.route !== '/resumes') return 0
  let extra = 0
  for (const fault of faults) {
    if (fault.kind !== 'payments-latency') continue
    const overlap = Math.min(fault.end, operation.end) - Math.max(fault.start, operation.start)
    if (overlap <= 0) continue
    extra += overlap + (fault.delayMs ?? 0)
  }
  return extra
}

export function check(input: CheckInput): CheckReport {
  const { operations, instances, faults, origin, boundMs } = input
  const executions = input.executions.map((execution) => ({ ...execution, at: execution.time - origin }))
  const byKey = new Map<string, Operation[]>()
  for (const operation of operations) {
    const id = identity(operation.user, operation.key)
    const list = byKey.get(id) ?? []
    list.push(operation)
    byKey.set(id, list)
  }
  const runsByKey = new Map<string, (Execution & { at: number })[]>()
  for (const execution of executions) {
    const id = identity(execution.user, execution.key)
    const list = runsByKey.get(id) ?? []
    list.push(execution)
    runsByKey.set(id, list)
  }
  const killed = killedPids(instances)
  const violations: Violation[] = []
  const answers: Record<string, number> = {}
  const finalStates: Record<string, number> = {}
  const recoveryReasons: Record<string, number> = {}
  const limits: Record<string, number> = {}
  const routes: CheckReport['routes'] = {}
  const faultCounts: Record<string, number> = {}
  for (const fault of faults) count(faultCounts, fault.kind)
  const chargesByKey = new Map<string, Charge[]>()
  for (const charge of input.charges ?? []) {
    const list = chargesByKey.get(charge.customer) ?? []
    list.push(charge)
    chargesByKey.set(charge.customer, list)
  }
  const downstream = {
    charges: input.charges?.length ?? 0,
    keys: 0,
    chargedKeys: 0,
    resumedKeys: 0,
    resumedAfterKill: 0,
    stepsRun: 0,
    stepsSkipped: 0,
    stepsSkippedAfterKill: 0,
  }
  const stepsByKey = new Map<string, StepLine[]>()
  for (const step of input.steps ?? []) {
    const id = identity(step.user, step.key)
    stepsByKey.set(id, [...(stepsByKey.get(id) ?? []), step])
  }
  const resumeRows = new Map<string, ResumeOrderRow[]>()
  for (const row of input.resumeOrders ?? []) {
    const id = identity(row.principal, row.key)
    resumeRows.set(id, [...(resumeRows.get(id) ?? []), row])
  }
  // A step of the store's clock keeps the store answering: it excuses no early 409; nor does a
  // fault of the payment service, which only `/resumes` calls.
  const faultDuring = (start: number, end: number) =>
    faults.some(
      (fault) =>
        fault.kind !== 'clock-step' &&
        !PAYMENTS_KINDS.includes(fault.kind) &&
        fault.start <= end + 50 &&
        Math.max(fault.end, fault.start) >= start - 50,
    )

  for (const operation of operations) {
    count(answers, answerLabel(operation))
    const { user, key } = operation
    if (operation.outcome === 'answer') {
      const codes = DOCUMENTED[operation.status]
      const documented =
        (operation.status >= 200 && operation.status < 300) || (codes?.includes(operation.code ?? '') ?? false)
      if (!documented) {
        violations.push({
          kind: 'undocumented-status',
          key,
          user,
          detail: `op ${operation.op}: ${operation.status} ${operation.code ?? ''}`.trim(),
        })
      }
    }
    const waited = operation.end - operation.start
    const late =
      operation.outcome === 'timeout' ||
      (operation.outcome === 'answer' && waited > boundMs + downstreamDelay(operation, faults))
    if (late && !disturbed(instances, operation.instance, operation.start, operation.end)) {
      violations.push({
        kind: 'hang',
        key,
        user,
        detail: `op ${operation.op} to instance ${operation.instance}: ${operation.outcome} after ${waited} ms (bound ${boundMs} ms), the instance running throughout`,
      })
    }
    const waitMs = ROUTE_RULES[operation.route]?.waitMs
    if (
      waitMs !== undefined &&
      operation.outcome === 'answer' &&
      operation.status === 409 &&
      waited < waitMs - WAIT_SLACK_MS &&
      !faultDuring(operation.start, operation.end) &&
      !disturbed(instances, operation.instance, operation.start, operation.end)
    ) {
      violations.push({
        kind: 'early-409',
        key,
        user,
        detail: `op ${operation.op}: 409 after ${waited} ms on a route that waits ${waitMs} ms, no fault meanwhile`,
      })
    }
  }

  // Whose answer each 2xx body is: the key it was first answered under without a replay.
  const answerOwner = new Map<string, { user: string; key: string }>()
  for (const operation of operations) {
    if (!is2xx(operation) || operation.replayed || operation.responseHash === undefined) continue
    if (!answerOwner.has(operation.responseHash))
      answerOwner.set(operation.responseHash, { user: operation.user, key: operation.key })
  }

  for (const [id, list] of byKey) {
    const { user, key, route } = list[0] as Operation
    const rules = ROUTE_RULES[route] ?? ROUTE_RULES['/orders']
    const runs = runsByKey.get(id) ?? []
    const same = list.filter((operation) => !operation.changed)
    const firstAnswer = same.filter(is2xx).sort((a, b) => a.end - b.end)[0]
    const found: Violation[] = []
    const routeCounts = routes[route] ?? { keys: 0, executions: 0, takenOver: 0, waitedReplays: 0 }
    routes[route] = routeCounts
    routeCounts.keys++
    routeCounts.executions += runs.length
    if (rules.expiredExecution === 'takeover' || rules.expiredExecution === 'resume') {
      if (runs.length > 1) routeCounts.takenOver++
      // A takeover or a resumed run runs the handler again with the next fencing token: one token, one run.
      const tokens = new Map<number, number>()
      for (const run of runs) tokens.set(run.token, (tokens.get(run.token) ?? 0) + 1)
      const shared = [...tokens].filter(([, runs]) => runs > 1)
      if (shared.length > 0) {
        found.push({
          kind: 'duplicate-execution',
          key,
          user,
          detail: `${runs.length} executions, ${shared.map(([token, n]) => `${n} with token ${token}`).join(', ')}: ${runs.map((run) => `pid ${run.pid} token ${run.token} at ${run.at}`).join('; ')}`,
        })
      }
    } else if (runs.length > 1 && route !== '/deposits') {
      // A deposit's run whose transaction rolled back left no effect: there the rows count (checkDeposits).
      found.push({
        kind: 'duplicate-execution',
        key,
        user,
        detail: `${runs.length} executions: ${runs.map((run) => `pid ${run.pid} token ${run.token} at ${run.at}`).join('; ')}`,
      })
    }
    if (firstAnswer !== undefined) {
      // On a takeover or resume route a stale owner whose handler starts late (its claim's reply
      // read after its lease ran out, its process stalled meanwhile) runs with a token below one
      // that ran before the answer: fenced, its completion refused, as a run stalled mid-handler
      // would be; counted as a limit with its reason. A re-run after the answer claims anew: a
      // token no lower than every earlier run's, the violation.
      const rerunsAllowed = rules.expiredExecution === 'takeover' || rules.expiredExecution === 'resume'
      const newest = Math.max(0, ...runs.filter((run) => run.at <= firstAnswer.end).map((run) => run.token))
      const afterAnswer = runs.filter((run) => run.at > firstAnswer.end)
      const later = afterAnswer.filter((run) => !(rerunsAllowed && run.token < newest))
      if (afterAnswer.length > later.length)
        count(limits, 'stale owner began its run after the new owner answered (lower token, fenced)')
      if (later.length > 0) {
        found.push({
          kind: 'run-after-answer',
          key,
          user,
          detail: `answered 2xx at ${firstAnswer.end} (op ${firstAnswer.op}), run again at ${later.map((run) => run.at).join(', ')}`,
        })
      }
      for (const operation of same) {
        if (operation.start <= firstAnswer.end || operation.outcome !== 'answer') continue
        if (
          operation.status === 409 ||
          operation.status === 422 ||
          operation.code === 'IDEMPOTENCY_RECOVERY_REQUIRED'
        ) {
          found.push({
            kind: 'lost-answer',
            key,
            user,
            detail:
              `answered 2xx at ${firstAnswer.end} (op ${firstAnswer.op}), then op ${operation.op} with the same body: ${operation.status} ${operation.code ?? ''}`.trimEnd(),
          })
        }
      }
      if (rules.waitMs !== undefined) {
        routeCounts.waitedReplays += same.filter(
          (operation) => is2xx(operation) && operation.replayed && operation.start < firstAnswer.end,
        ).length
      }
    }
    for (const operation of same) {
      if (operation.outcome !== 'answer' || operation.status !== 422) continue
      if (firstAnswer !== undefined && operation.start > firstAnswer.end) continue
      found.push({
        kind: 'same-body-rejected',
        key,
        user,
        detail: `op ${operation.op}: 422 ${operation.code ?? ''} for the body this principal always sent with this key`,
      })
    }
    const bodies = new Set(same.filter(is2xx).map((operation) => operation.responseHash))
    if (bodies.size > 1) {
      const tokens = new Set(runs.map((run) => run.token))
      found.push({
        kind: 'different-answers',
        key,
        user,
        detail: `${bodies.size} different 2xx bodies: ${[...bodies].join(', ')}${tokens.size > 1 ? ` (a stale completion: runs with tokens ${[...tokens].join(', ')})` : ''}`,
      })
    }
    for (const operation of list.filter(is2xx)) {
      const owner = operation.responseHash === undefined ? undefined : answerOwner.get(operation.responseHash)
      if (owner !== undefined && (owner.key !== key || owner.user !== user)) {
        found.push({
          kind: 'foreign-answer',
          key,
          user,
          detail: `op ${operation.op}: answered ${operation.status}${operation.replayed ? ' (replayed)' : ''} with the answer of ${owner.key}${owner.user !== user ? ` of principal ${owner.user}` : ''}`,
        })
      }
    }
    if (rules.expiredExecution === 'resume') {
      downstream.keys++
      if (runs.length > 1) downstream.resumedKeys++
      // Resumed after a kill: a run's process SIGKILLed before the key's next run began.
      const inOrder = [...runs].sort((a, b) => a.at - b.at)
      const killedAt = (pid: number) => instances.find((life) => life.pid === pid)?.killed
      if (
        inOrder.some((run, i) => {
          const at = killedAt(run.pid)
          const next = inOrder[i + 1]
          return at !== undefined && next !== undefined && at <= next.at
        })
      )
        downstream.resumedAfterKill++
      if (input.charges !== undefined) checkCharges(id, key, user, same, chargesByKey.get(id) ?? [], found)
      if ((chargesByKey.get(id)?.length ?? 0) > 0) downstream.chargedKeys++
      const steps = stepsByKey.get(id) ?? []
      checkSteps(key, user, steps, found)
      downstream.stepsRun += steps.filter((step) => step.ran).length
      const skipped = steps.filter((step) => !step.ran)
      downstream.stepsSkipped += skipped.length
      downstream.stepsSkippedAfterKill += skipped.filter((step) =>
        runs.some((run) => run.token < step.token && killedAt(run.pid) !== undefined),
      ).length
      if (input.resumeOrders !== undefined) checkResumeRows(key, user, same, resumeRows.get(id) ?? [], found)
    }
    for (const operation of list.filter((candidate) => candidate.changed && is2xx(candidate))) {
      found.push({
        kind: 'changed-body-accepted',
        key,
        user,
        detail: `op ${operation.op}: a changed body answered ${operation.status}${operation.replayed ? ' (replayed)' : ''}`,
      })
    }

    // The final state, from the probe after the quiet phase.
    const probe = same.filter((operation) => operation.probe).sort((a, b) => b.end - a.end)[0]
    let state: FinalState
    if (probe === undefined) state = 'not-probed'
    else if (is2xx(probe)) state = 'completed'
    else if (probe.outcome === 'answer' && probe.code === 'IDEMPOTENCY_RECOVERY_REQUIRED') state = 'recovery-required'
    else state = 'unsettled'
    count(finalStates, state)
    if (state === 'unsettled' && probe !== undefined) {
      found.push({
        kind: 'unsettled',
        key,
        user,
        detail: `after the quiet phase the probe got ${answerLabel(probe)} ${probe.code ?? ''}`.trim(),
      })
    }
    if (state === 'recovery-required' && rules.expiredExecution === 'resume') {
      found.push({
        kind: 'unsettled',
        key,
        user,
        detail:
          'recovery-required on a resume: true route, where a killed, stalled or failed run is resumed by the next retry',
      })
    } else if (state === 'recovery-required') {
      const reason = recoveryReason(list, runs, killed, instances, faults)
      if (reason === undefined) {
        found.push({
          kind: 'unsettled',
          key,
          user,
          detail: 'recovery-required, yet no instance that held it was killed and none of its answers was lost',
        })
      } else {
        count(recoveryReasons, reason)
        count(limits, `recovery-required: ${reason}`)
      }
    }

    // Without durability a failover may lose what the old master acknowledged: a limit, with its reason.
    const first = Math.min(...list.map((operation) => operation.start))
    const last = Math.max(...list.map((operation) => operation.end))
    const failedOver =
      input.unsafeFailover === true &&
      faults.some((fault) => FAILOVERS.has(fault.kind) && fault.start <= last && fault.end >= first)
    for (const violation of found) {
      if (failedOver && FAILOVER_LOSSES.has(violation.kind)) {
        count(limits, `unsafe Redis failover without durability: ${violation.kind}`)
      } else violations.push(violation)
    }
  }

  if (input.deposits !== undefined) checkDeposits(input, byKey, violations)

  const violationsByKind: Record<string, number> = {}
  for (const violation of violations) count(violationsByKind, violation.kind)
  const first = violations[0]
  const firstId = first?.user === undefined ? '' : identity(first.user, first.key)
  const clock = clockWindows(operations, faults)
  return {
    operations: operations.length,
    keys: byKey.size,
    executions: executions.length,
    answers,
    faults: faultCounts,
    finalStates,
    recoveryReasons,
    limits,
    routes,
    downstream,
    violations,
    violationsByKind,
    ...(first === undefined
      ? {}
      : {
          firstViolation: keyHistory(
            first,
            byKey.get(firstId) ?? [],
            runsByKey.get(firstId) ?? [],
            input.records?.[firstId],
            chargesByKey.get(firstId),
          ),
        }),
    ...(clock === undefined ? {} : { clock }),
  }
}

/**
 * The downstream effect of one key of a `resume` route, exactly once: at most one charge whose
 * customer is the key's identity, one for a key answered 2xx, and every 2xx answer (same body)
 * naming that charge.
 */
function checkCharges(
  id: string,
  key: string,
  user: string,
  same: readonly Operation[],
  charges: readonly Charge[],
  found: Violation[],
): void {
  if (charges.length > 1) {
    found.push({
      kind: 'double-charge',
      key,
      user,
      detail: `${charges.length} charges for ${id}: ${charges.map((charge) => charge.id).join(', ')}`,
    })
  }
  const answered = same.filter(is2xx)
  if (answered.length > 0 && charges.length === 0) {
    found.push({ kind: 'missing-charge', key, user, detail: `answered 2xx (op ${answered[0]?.op}), yet never charged` })
  }
  const ids = new Set(charges.map((charge) => charge.id))
  for (const operation of answered) {
    if (operation.charge !== undefined && ids.has(operation.charge)) continue
    found.push({
      kind: 'wrong-charge',
      key,
      user,
      detail: `op ${operation.op}: answered ${operation.status}${operation.replayed ? ' (replayed)' : ''} naming charge ${operation.charge ?? '(none)'}, the key's charges: ${[...ids].join(', ') || 'none'}`,
    })
  }
}

/**
 * `/resumes`'s charge step on PostgreSQL, for one key: a step returns only once it committed (or
 * found its point committed), so at most one run of the key ran it (`step-rerun`: a re-run called
 * the payment service again though the charge's point was committed, or two runs committed it),
 * and every run got the one charge back (`step-result`).
 */
function checkSteps(key: string, user: string, steps: readonly StepLine[], found: Violation[]): void {
  const ran = steps.filter((step) => step.ran)
  if (ran.length > 1) {
    found.push({
      kind: 'step-rerun',
      key,
      user,
      detail: `the charge step ran and committed in ${ran.length} runs: ${ran.map((step) => `pid ${step.pid} token ${step.token}`).join('; ')}`,
    })
  }
  const charges = new Set(steps.map((step) => step.charge))
  if (charges.size > 1) {
    found.push({
      kind: 'step-result',
      key,
      user,
      detail: `the charge step returned ${charges.size} charges: ${steps.map((step) => `token ${step.token} ${step.ran ? 'ran' : 'skipped'} ${step.charge}`).join('; ')}`,
    })
  }
}

/**
 * `/resumes`'s order rows on PostgreSQL, for one key, written with the answer: at most one, one
 * for a key answered 2xx naming the charge that answer names, none for a key never answered 2xx.
 */
function checkResumeRows(
  key: string,
  user: string,
  same: readonly Operation[],
  rows: readonly ResumeOrderRow[],
  found: Violation[],
): void {
  const answered = same.find(is2xx)
  const problem =
    rows.length > 1
      ? `${rows.length} order rows`
      : answered !== undefined && rows.length === 0
        ? `answered 2xx (op ${answered.op}) with no order row`
        : answered === undefined && rows.length > 0
          ? 'an order row, yet never answered 2xx'
          : answered?.charge !== undefined && rows[0] !== undefined && rows[0].charge !== answered.charge
            ? `the order row names charge ${rows[0].charge}, the answer (op ${answered.op}) ${answered.charge}`
            : undefined
  if (problem !== undefined) found.push({ kind: 'resume-rows', key, user, detail: problem })
}

/**
 * Why a key is legitimately recovery-required (docs/errors.md): an execution (or the claim
 * that started it) ran in a process that was killed, or an answer of it was lost to a fault
 * (no answer came, or 503 store-unavailable: the outcome may not have been stored).
 */
function recoveryReason(
  list: readonly Operation[],
  runs: readonly Execution[],
  killed: ReadonlySet<number>,
  instances: readonly InstanceLife[],
  faults: readonly AppliedFault[],
): string | undefined {
  if (runs.some((run) => killed.has(run.pid))) return 'handler killed mid-run'
  const beforeProbe = list.filter((operation) => !operation.probe)
  if (
    beforeProbe.some(
      (operation) =>
        operation.outcome !== 'answer' && disturbed(instances, operation.instance, operation.start, operation.end),
    )
  )
    return 'claim held by a killed or paused instance'
  if (beforeProbe.some((operation) => operation.code === 'IDEMPOTENCY_STORE_UNAVAILABLE' && runs.length > 0))
    return 'answer could not be stored (store fault)'
  // A claim whose reply a fault kept answers 503 store-unavailable and is settled in the
  // background for as long as the process lives (docs/guarantees.md): one that landed, its
  // instance killed before the store answered it again, stays held.
  if (
    runs.length === 0 &&
    beforeProbe.some(
      (operation) =>
        operation.code === 'IDEMPOTENCY_STORE_UNAVAILABLE' &&
        killedBeforeSettling(instances, faults, operation.instance, operation.end),
    )
  )
    return 'undecided claim, its instance killed before it could settle it'
  if (beforeProbe.some((operation) => operation.outcome !== 'answer')) return 'request lost to a fault'
  return undefined
}

function checkDeposits(input: CheckInput, byKey: Map<string, Operation[]>, violations: Violation[]): void {
  const rows = new Map<string, DepositRow[]>()
  for (const row of input.deposits ?? []) {
    const id = identity(row.principal, row.key)
    const list = rows.get(id) ?? []
    list.push(row)
    rows.set(id, list)
  }
  const expected = new Map<string, number>()
  for (const [id, list] of byKey) {
    if (list[0]?.route !== '/deposits') continue
    const key = list[0].key
    const found = rows.get(id) ?? []
    const answered = list.find((operation) => !operation.changed && is2xx(operation))
    if (found.length > 1) violations.push({ kind: 'deposit-rows', key, detail: `${found.length} deposit rows` })
    if (answered !== undefined && found.length !== 1)
      violations.push({
        kind: 'deposit-rows',
        key,
        detail: `answered 2xx (op ${answered.op}) with ${found.length} rows`,
      })
    if (answered === undefined && found.length > 0)
      violations.push({ kind: 'deposit-rows', key, detail: `${found.length} rows, yet never answered 2xx` })
    if (answered !== undefined && answered.account !== undefined) {
      expected.set(answered.account, (expected.get(answered.account) ?? 0) + (answered.amount ?? 0))
    }
  }
  const balances = new Map((input.balances ?? []).map((row) => [row.account, Number(row.balance)]))
  for (const account of new Set([...expected.keys(), ...balances.keys()])) {
    const want = expected.get(account) ?? 0
    const got = balances.get(account) ?? 0
    if (want !== got)
      violations.push({
        kind: 'balance',
        key: `account ${account}`,
        detail: `balance ${got}, one deposit per key answered 2xx makes ${want}`,
      })
  }
}

/** A key's history as text: each operation and execution, in time order. */
export function keyHistory(
  violation: Violation,
  list: readonly Operation[],
  runs: readonly Execution[],
  record?: object,
  charges?: readonly Charge[],
): string {
  const lines = [
    `first violation: ${violation.kind} on ${violation.key}${violation.user === undefined ? '' : ` (principal ${violation.user})`}: ${violation.detail}`,
  ]
  if (record !== undefined) lines.push(`  its record after the probes: ${JSON.stringify(record)}`)
  if (charges !== undefined && charges.length > 0)
    lines.push(`  its charges at the payment service: ${charges.map((charge) => charge.id).join(', ')}`)
  const events: { at: number; text: string }[] = [
    ...list.map((operation) => ({
      at: operation.start,
      text:
        `op ${operation.op} client ${operation.client} (${operation.user}) → instance ${operation.instance} ${operation.route} body ${operation.bodyHash}` +
        `${operation.changed ? ' (changed)' : ''}${operation.probe ? ' (probe)' : ''}: ${operation.start}–${operation.end} ms ` +
        `${answerLabel(operation)} ${operation.code ?? ''} ${operation.responseHash ? `answer ${operation.responseHash}` : ''}${operation.charge ? ` charge ${operation.charge}` : ''}`.trimEnd(),
    })),
    ...runs.map((run) => ({
      at: (run as { at?: number }).at ?? 0,
      text: `execution pid ${run.pid} token ${run.token}`,
    })),
  ]
  for (const event of events.sort((a, b) => a.at - b.at))
    lines.push(`  ${String(event.at).padStart(7)} ms  ${event.text}`)
  return lines.join('\n')
}
