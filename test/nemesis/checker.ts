/**
 * The nemesis checker: offline, from a run's history, the apps' execution log and (on
 * PostgreSQL) the deposit rows, it checks the guarantees of docs/guarantees.md per key:
 *
 * - `duplicate-execution`: the order handler ran at most once per key (every route here is
 *   `expiredExecution: 'recover'`, so no documented re-run exists; a deposit may run again
 *   after its transaction rolled back, so there the rows are counted instead);
 * - `run-after-answer`: no key answered 2xx ran its handler again afterwards;
 * - `different-answers`: every 2xx answer for a key has the same body, byte for byte;
 * - `lost-answer`: after a key was answered 2xx, a retry with the same body never gets 409 or
 *   503 recovery-required (the completed record is there; Redis runs with `appendfsync always`);
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
 *   is the sum of one deposit per key answered 2xx).
 */
import type { AppliedFault, BalanceRow, DepositRow, Execution, InstanceLife, Operation } from './history.js'

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
}

export type ViolationKind =
  | 'duplicate-execution'
  | 'run-after-answer'
  | 'different-answers'
  | 'lost-answer'
  | 'changed-body-accepted'
  | 'foreign-answer'
  | 'undocumented-status'
  | 'hang'
  | 'unsettled'
  | 'deposit-rows'
  | 'balance'

export interface Violation {
  readonly kind: ViolationKind
  readonly key: string
  readonly detail: string
}

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
  readonly violations: readonly Violation[]
  readonly violationsByKind: Record<string, number>
  /** The first violating key's operations and executions, as text. */
  readonly firstViolation?: string
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
  // HANDLER_RETRYABLE: the app's own 503 when a deposit's write failed (its transaction rolled back).
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

export function check(input: CheckInput): CheckReport {
  const { operations, instances, faults, origin, boundMs } = input
  const executions = input.executions.map((execution) => ({ ...execution, at: execution.time - origin }))
  const byKey = new Map<string, Operation[]>()
  for (const operation of operations) {
    const list = byKey.get(operation.key) ?? []
    list.push(operation)
    byKey.set(operation.key, list)
  }
  const runsByKey = new Map<string, (Execution & { at: number })[]>()
  for (const execution of executions) {
    const list = runsByKey.get(execution.key) ?? []
    list.push(execution)
    runsByKey.set(execution.key, list)
  }
  const killed = killedPids(instances)
  const violations: Violation[] = []
  const answers: Record<string, number> = {}
  const finalStates: Record<string, number> = {}
  const recoveryReasons: Record<string, number> = {}
  const faultCounts: Record<string, number> = {}
  for (const fault of faults) count(faultCounts, fault.kind)

  for (const operation of operations) {
    count(answers, answerLabel(operation))
    if (operation.outcome === 'answer') {
      const codes = DOCUMENTED[operation.status]
      const documented =
        (operation.status >= 200 && operation.status < 300) || (codes?.includes(operation.code ?? '') ?? false)
      if (!documented) {
        violations.push({
          kind: 'undocumented-status',
          key: operation.key,
          detail: `op ${operation.op}: ${operation.status} ${operation.code ?? ''}`.trim(),
        })
      }
    }
    const waited = operation.end - operation.start
    const late = operation.outcome === 'timeout' || (operation.outcome === 'answer' && waited > boundMs)
    if (late && !disturbed(instances, operation.instance, operation.start, operation.end)) {
      violations.push({
        kind: 'hang',
        key: operation.key,
        detail: `op ${operation.op} to instance ${operation.instance}: ${operation.outcome} after ${waited} ms (bound ${boundMs} ms), the instance running throughout`,
      })
    }
  }

  // Whose answer each 2xx body is: the key it was first answered under without a replay.
  const answerOwner = new Map<string, string>()
  for (const operation of operations) {
    if (!is2xx(operation) || operation.replayed || operation.responseHash === undefined) continue
    if (!answerOwner.has(operation.responseHash)) answerOwner.set(operation.responseHash, operation.key)
  }

  for (const [key, list] of byKey) {
    const runs = runsByKey.get(key) ?? []
    const same = list.filter((operation) => !operation.changed)
    const firstAnswer = same.filter(is2xx).sort((a, b) => a.end - b.end)[0]
    // A deposit's run whose transaction rolled back left no effect: there the rows count (checkDeposits).
    if (runs.length > 1 && list[0]?.route !== '/deposits') {
      violations.push({
        kind: 'duplicate-execution',
        key,
        detail: `${runs.length} executions: ${runs.map((run) => `pid ${run.pid} token ${run.token} at ${run.at}`).join('; ')}`,
      })
    }
    if (firstAnswer !== undefined) {
      const later = runs.filter((run) => run.at > firstAnswer.end)
      if (later.length > 0) {
        violations.push({
          kind: 'run-after-answer',
          key,
          detail: `answered 2xx at ${firstAnswer.end} (op ${firstAnswer.op}), run again at ${later.map((run) => run.at).join(', ')}`,
        })
      }
      for (const operation of same) {
        if (operation.start <= firstAnswer.end || operation.outcome !== 'answer') continue
        if (operation.status === 409 || operation.code === 'IDEMPOTENCY_RECOVERY_REQUIRED') {
          violations.push({
            kind: 'lost-answer',
            key,
            detail: `answered 2xx at ${firstAnswer.end} (op ${firstAnswer.op}), then op ${operation.op}: ${operation.status} ${operation.code ?? ''}`,
          })
        }
      }
    }
    const bodies = new Set(same.filter(is2xx).map((operation) => operation.responseHash))
    if (bodies.size > 1) {
      violations.push({
        kind: 'different-answers',
        key,
        detail: `${bodies.size} different 2xx bodies: ${[...bodies].join(', ')}`,
      })
    }
    for (const operation of list.filter(is2xx)) {
      const owner = operation.responseHash === undefined ? undefined : answerOwner.get(operation.responseHash)
      if (owner !== undefined && owner !== key) {
        violations.push({
          kind: 'foreign-answer',
          key,
          detail: `op ${operation.op}: answered ${operation.status}${operation.replayed ? ' (replayed)' : ''} with the answer of ${owner}`,
        })
      }
    }
    for (const operation of list.filter((candidate) => candidate.changed && is2xx(candidate))) {
      violations.push({
        kind: 'changed-body-accepted',
        key,
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
      violations.push({
        kind: 'unsettled',
        key,
        detail: `after the quiet phase the probe got ${answerLabel(probe)} ${probe.code ?? ''}`.trim(),
      })
    }
    if (state === 'recovery-required') {
      const reason = recoveryReason(list, runs, killed, instances, faults)
      if (reason === undefined) {
        violations.push({
          kind: 'unsettled',
          key,
          detail: 'recovery-required, yet no instance that held it was killed and none of its answers was lost',
        })
      } else count(recoveryReasons, reason)
    }
  }

  if (input.deposits !== undefined) checkDeposits(input, byKey, violations)

  const violationsByKind: Record<string, number> = {}
  for (const violation of violations) count(violationsByKind, violation.kind)
  const first = violations[0]
  return {
    operations: operations.length,
    keys: byKey.size,
    executions: executions.length,
    answers,
    faults: faultCounts,
    finalStates,
    recoveryReasons,
    violations,
    violationsByKind,
    ...(first === undefined
      ? {}
      : {
          firstViolation: keyHistory(
            first,
            byKey.get(first.key) ?? [],
            runsByKey.get(first.key) ?? [],
            input.records?.[first.key],
          ),
        }),
  }
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
    const list = rows.get(row.key) ?? []
    list.push(row)
    rows.set(row.key, list)
  }
  const expected = new Map<string, number>()
  for (const [key, list] of byKey) {
    if (list[0]?.route !== '/deposits') continue
    const found = rows.get(key) ?? []
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
): string {
  const lines = [`first violation: ${violation.kind} on ${violation.key}: ${violation.detail}`]
  if (record !== undefined) lines.push(`  its record after the probes: ${JSON.stringify(record)}`)
  const events: { at: number; text: string }[] = [
    ...list.map((operation) => ({
      at: operation.start,
      text:
        `op ${operation.op} client ${operation.client} → instance ${operation.instance} ${operation.route} body ${operation.bodyHash}` +
        `${operation.changed ? ' (changed)' : ''}${operation.probe ? ' (probe)' : ''}: ${operation.start}–${operation.end} ms ` +
        `${answerLabel(operation)} ${operation.code ?? ''} ${operation.responseHash ? `answer ${operation.responseHash}` : ''}`.trimEnd(),
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
