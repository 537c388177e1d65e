/**
 * The checker on histories written by hand: each guarantee it checks is reported when the
 * history breaks it, and a history that keeps them all has no violation. The schedule is the
 * same for the same seed.
 */
import { describe, expect, it } from 'vitest'
import { type CheckInput, check } from './checker.js'
import type { Execution, InstanceLife, Operation, Route, StepLine } from './history.js'
import { latencyPlot, throughputPlot } from './plot.js'
import { INSTANT, makeSchedule, PAYMENTS_KINDS } from './schedule.js'

const ORIGIN = 1_000_000
let nextOp = 0
function op(fields: Partial<Operation> & Pick<Operation, 'key' | 'start' | 'end' | 'status'>): Operation {
  return {
    op: nextOp++,
    client: 0,
    user: 'u0',
    route: '/orders',
    instance: 0,
    bodyHash: 'b1',
    changed: false,
    probe: false,
    outcome: 'answer',
    replayed: false,
    ...(fields.status === 201 ? { responseHash: `r1-${fields.key}` } : {}),
    ...fields,
  }
}
const run = (key: string, at: number, pid = 10, token = 1): Execution => ({
  type: 'execution',
  route: '/orders',
  key,
  user: 'u0',
  token,
  pid,
  time: ORIGIN + at,
})
const alive: InstanceLife[] = [0, 1, 2].map((instance) => ({ instance, pid: 10 + instance, started: 0, paused: [] }))
/** Instance 0's first process (pid 10) SIGKILLed at 500 ms and restarted (pid 13) at 2 s. */
const killedThenRestarted: InstanceLife[] = [
  { instance: 0, pid: 10, started: 0, killed: 500, paused: [] },
  { instance: 0, pid: 13, started: 2_000, paused: [] },
  { instance: 1, pid: 11, started: 0, paused: [] },
  { instance: 2, pid: 12, started: 0, paused: [] },
]

/** A key run once, answered 201, a retry replayed, and the probe replayed. */
function goodKey(key: string): { operations: Operation[]; executions: Execution[] } {
  return {
    operations: [
      op({ key, start: 0, end: 100, status: 201 }),
      op({ key, start: 50, end: 60, status: 409, code: 'IDEMPOTENCY_IN_FLIGHT', instance: 1 }),
      op({ key, start: 200, end: 210, status: 201, replayed: true, instance: 1 }),
      op({ key, start: 220, end: 230, status: 422, code: 'IDEMPOTENCY_KEY_REUSED', changed: true, bodyHash: 'b2' }),
      op({ key, start: 20_000, end: 20_010, status: 201, replayed: true, probe: true }),
    ],
    executions: [run(key, 10)],
  }
}

/**
 * A `/resumes` key whose first run's instance was killed at 500 ms (no answer), a retry answered
 * 409 while the lease ran, the resumed run on instance 1 answered 201 naming charge ch_1, and the
 * probe replayed it.
 */
function resumedKey(key: string): Operation[] {
  const resume = (fields: Partial<Operation> & Pick<Operation, 'start' | 'end' | 'status'>) =>
    op({ key, route: '/resumes', ...fields })
  return [
    resume({ start: 0, end: 500, status: 0, outcome: 'error', error: 'ECONNRESET' }),
    resume({ start: 700, end: 710, status: 409, code: 'IDEMPOTENCY_IN_FLIGHT', instance: 1 }),
    resume({ start: 1_290, end: 1_500, status: 201, responseHash: 'a1', charge: 'ch_1', instance: 1 }),
    resume({
      start: 20_000,
      end: 20_010,
      status: 201,
      replayed: true,
      responseHash: 'a1',
      charge: 'ch_1',
      probe: true,
    }),
  ]
}

function input(operations: Operation[], executions: Execution[], extra: Partial<CheckInput> = {}): CheckInput {
  return { operations, executions, instances: alive, faults: [], origin: ORIGIN, boundMs: 12_000, ...extra }
}

describe('nemesis checker', () => {
  it('finds no violation in a history that keeps every guarantee', () => {
    const { operations, executions } = goodKey('k1')
    const report = check(input(operations, executions))
    expect(report.violations).toEqual([])
    expect(report.finalStates).toEqual({ completed: 1 })
    expect(report.answers).toEqual({ '201': 1, replay: 2, '409': 1, '422': 1 })
  })

  it('reports a second execution of a key, and one after its 2xx answer', () => {
    const { operations, executions } = goodKey('k1')
    const report = check(input(operations, [...executions, run('k1', 150, 11)]))
    expect(report.violationsByKind).toEqual({ 'duplicate-execution': 1, 'run-after-answer': 1 })
    expect(report.firstViolation).toContain('duplicate-execution on k1')
    expect(report.firstViolation).toContain('execution pid 11')
  })

  it('reports two different 2xx bodies for one key', () => {
    const { operations, executions } = goodKey('k1')
    operations[2] = { ...(operations[2] as Operation), responseHash: 'r2-k1' }
    expect(check(input(operations, executions)).violationsByKind).toEqual({ 'different-answers': 1 })
  })

  it('reports a changed body answered 2xx', () => {
    const { operations, executions } = goodKey('k1')
    operations[3] = {
      ...(operations[3] as Operation),
      status: 201,
      code: undefined,
      replayed: true,
      responseHash: 'r1-k1',
    }
    expect(check(input(operations, executions)).violationsByKind).toEqual({ 'changed-body-accepted': 1 })
  })

  it("reports a key answered with another key's answer, and not the key whose answer it is", () => {
    const k1 = goodKey('k1')
    // k2's claim got k1's reply (a stored response replayed): k2 never ran, its record holds no answer.
    const operations = [
      ...k1.operations,
      op({ key: 'k2', user: 'u1', start: 300, end: 320, status: 201, replayed: true, responseHash: 'r1-k1' }),
      op({
        key: 'k2',
        user: 'u1',
        start: 20_000,
        end: 20_010,
        status: 503,
        code: 'IDEMPOTENCY_RECOVERY_REQUIRED',
        probe: true,
      }),
    ]
    const report = check(input(operations, k1.executions))
    expect(report.violationsByKind).toEqual({ 'foreign-answer': 1, 'lost-answer': 1, unsettled: 1 })
    expect(report.violations.find((violation) => violation.kind === 'foreign-answer')).toMatchObject({
      key: 'k2',
      detail: expect.stringContaining('the answer of k1'),
    })
  })

  it('reports a lost answer: 409 or recovery-required after a 2xx', () => {
    const { operations, executions } = goodKey('k1')
    operations[2] = { ...(operations[2] as Operation), status: 409, code: 'IDEMPOTENCY_IN_FLIGHT', replayed: false }
    expect(check(input(operations, executions)).violationsByKind).toEqual({ 'lost-answer': 1 })
  })

  it('reports a 500 and an unknown code as undocumented', () => {
    const { operations, executions } = goodKey('k1')
    operations.push(op({ key: 'k1', start: 300, end: 310, status: 500 }))
    operations.push(op({ key: 'k1', start: 320, end: 330, status: 503, code: 'SOMETHING_ELSE' }))
    expect(check(input(operations, executions)).violationsByKind).toEqual({ 'undocumented-status': 2 })
  })

  it('reports a hang unless the instance was paused or killed meanwhile', () => {
    const { operations, executions } = goodKey('k1')
    operations.push(op({ key: 'k1', start: 1_000, end: 16_000, status: 0, outcome: 'timeout', instance: 2 }))
    expect(check(input(operations, executions)).violationsByKind).toEqual({ hang: 1 })
    const paused = alive.map((life) =>
      life.instance === 2 ? { ...life, paused: [{ start: 2_000, end: 6_000 }] } : life,
    )
    expect(check(input(operations, executions, { instances: paused })).violations).toEqual([])
  })

  it("extends the bound of a /resumes answer by the payment service's injected latency it overlapped, and of no other route", () => {
    const { operations, executions } = goodKey('k1')
    const late = (route: Route) =>
      op({ key: 'k9', route, start: 22_696, end: 34_723, status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
    const slowed = { faults: [{ kind: 'payments-latency' as const, start: 22_240, end: 26_028, delayMs: 2257 }] }
    const hangs = (route: Route, extra: Partial<CheckInput>) =>
      check(input([...operations, late(route)], executions, extra)).violations.filter((v) => v.kind === 'hang')
    expect(hangs('/resumes', slowed)).toEqual([])
    expect(hangs('/resumes', {})).toHaveLength(1)
    expect(hangs('/orders', slowed)).toHaveLength(1)
  })

  it('accepts recovery-required when the handler was killed, and reports it without a reason', () => {
    const operations = [
      op({ key: 'k2', start: 0, end: 500, status: 0, outcome: 'error', instance: 1 }),
      op({ key: 'k2', start: 20_000, end: 20_010, status: 503, code: 'IDEMPOTENCY_RECOVERY_REQUIRED', probe: true }),
    ]
    const killed = alive.map((life) => (life.instance === 1 ? { ...life, killed: 300 } : life))
    const report = check(input(operations, [run('k2', 10, 11)], { instances: killed }))
    expect(report.violations).toEqual([])
    expect(report.recoveryReasons).toEqual({ 'handler killed mid-run': 1 })

    const quiet = [
      op({ key: 'k3', start: 0, end: 500, status: 201 }),
      op({ key: 'k3', start: 20_000, end: 20_010, status: 409, code: 'IDEMPOTENCY_IN_FLIGHT', probe: true }),
    ]
    expect(check(input(quiet, [run('k3', 10)])).violationsByKind).toEqual({ 'lost-answer': 1, unsettled: 1 })
  })

  it('accepts recovery-required after a 503 store-unavailable only when that instance was killed before it could settle its claim', () => {
    const operations = [
      op({ key: 'k4', start: 0, end: 3_000, status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE', instance: 1 }),
      op({ key: 'k4', start: 5_000, end: 5_010, status: 503, code: 'IDEMPOTENCY_RECOVERY_REQUIRED' }),
      op({ key: 'k4', start: 20_000, end: 20_010, status: 503, code: 'IDEMPOTENCY_RECOVERY_REQUIRED', probe: true }),
    ]
    const killedSoon = alive.map((life) => (life.instance === 1 ? { ...life, killed: 4_600 } : life))
    const report = check(input(operations, [], { instances: killedSoon }))
    expect(report.violations).toEqual([])
    expect(report.recoveryReasons).toEqual({ 'undecided claim, its instance killed before it could settle it': 1 })
    // Alive all along (or killed long after): it had to settle the claim.
    expect(check(input(operations, [])).violationsByKind).toEqual({ unsettled: 1 })
    const killedLate = alive.map((life) => (life.instance === 1 ? { ...life, killed: 15_000 } : life))
    expect(check(input(operations, [], { instances: killedLate })).violationsByKind).toEqual({ unsettled: 1 })
    // Unless the store was out of its reach until just before the kill.
    const paused = [{ kind: 'store-pause' as const, start: 2_000, end: 14_900 }]
    expect(check(input(operations, [], { instances: killedLate, faults: paused })).violations).toEqual([])
    const cutOff = [{ kind: 'proxy-drop' as const, start: 2_000, end: 14_900, instance: 2 }]
    expect(check(input(operations, [], { instances: killedLate, faults: cutOff })).violationsByKind).toEqual({
      unsettled: 1,
    })
  })

  it('reports a 422 for the same body after a 2xx as a lost answer, and not one for a changed body', () => {
    const { operations, executions } = goodKey('k1')
    expect(check(input(operations, executions)).violations).toEqual([])
    operations[2] = { ...(operations[2] as Operation), status: 422, code: 'IDEMPOTENCY_KEY_REUSED', replayed: false }
    const report = check(input(operations, executions))
    expect(report.violationsByKind).toEqual({ 'lost-answer': 1 })
    expect(report.violations[0]?.detail).toContain('with the same body: 422 IDEMPOTENCY_KEY_REUSED')
  })

  it('reports a 422 for a body never changed before any 2xx', () => {
    const operations = [
      op({ key: 'k1', start: 0, end: 100, status: 422, code: 'IDEMPOTENCY_KEY_REUSED' }),
      op({ key: 'k1', start: 20_000, end: 20_010, status: 201, probe: true }),
    ]
    expect(check(input(operations, [run('k1', 20_005)])).violationsByKind).toEqual({ 'same-body-rejected': 1 })
  })

  it("checks one key string per principal: each its own answer, never the other principal's", () => {
    const mine = (user: string, hash: string, extra: Partial<Operation> = {}) =>
      op({ key: 'shared', user, start: 0, end: 100, status: 201, responseHash: hash, ...extra })
    const runOf = (user: string, at: number, pid: number): Execution => ({ ...run('shared', at, pid), user })
    const own = [
      mine('u0', 'a0'),
      mine('u1', 'a1', { instance: 1 }),
      mine('u0', 'a0', { start: 20_000, end: 20_010, replayed: true, probe: true }),
      mine('u1', 'a1', { start: 20_000, end: 20_010, replayed: true, probe: true }),
    ]
    const runs = [runOf('u0', 10, 10), runOf('u1', 20, 11)]
    const good = check(input(own, runs))
    expect(good.violations).toEqual([])
    expect(good.keys).toBe(2)
    // A build whose replay skips the principal: u1 gets u0's answer and never runs.
    const leaked = [...own.slice(0, 3), mine('u1', 'a0', { instance: 1, replayed: true })]
    const report = check(input(leaked, runs.slice(0, 1)))
    expect(report.violationsByKind).toMatchObject({ 'foreign-answer': 1 })
    expect(report.violations.find((violation) => violation.kind === 'foreign-answer')).toMatchObject({
      key: 'shared',
      user: 'u1',
      detail: expect.stringContaining('of principal u0'),
    })
  })

  it('on a takeover route accepts a run again with the next token, and reports a stale completion', () => {
    const take = (fields: Partial<Operation> & Pick<Operation, 'start' | 'end' | 'status'>) =>
      op({ key: 't1', route: '/takeovers', ...fields })
    const runs = [run('t1', 10, 10, 1), run('t1', 1_210, 11, 2)]
    // The first run stalls past its lease; a hedge takes the key over and answers; the stale
    // owner's completion is refused (503) and its retry replays the new owner's answer.
    const operations = [
      take({ start: 0, end: 1_600, status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE' }),
      take({ start: 1_200, end: 1_400, status: 201, responseHash: 'r2', instance: 1, hedge: true }),
      take({ start: 2_700, end: 2_710, status: 201, replayed: true, responseHash: 'r2' }),
      take({ start: 20_000, end: 20_010, status: 201, replayed: true, responseHash: 'r2', probe: true }),
    ]
    const good = check(input(operations, runs))
    expect(good.violations).toEqual([])
    expect(good.routes['/takeovers']).toEqual({ keys: 1, executions: 2, takenOver: 1, waitedReplays: 0 })
    // The same two runs on a recover route: a duplicate execution.
    const recover = operations.map((operation) => ({ ...operation, route: '/orders' as const }))
    expect(check(input(recover, runs)).violationsByKind).toEqual({ 'duplicate-execution': 1 })
    // Two runs with one token: the claim was not held.
    expect(check(input(operations, [run('t1', 10, 10, 1), run('t1', 1_210, 11, 1)])).violationsByKind).toEqual({
      'duplicate-execution': 1,
    })
    // The stale owner's claim landed, but its handler began only after the new owner answered
    // (its process stalled between the claim and the handler): fenced, not a re-run. A run after
    // the answer with a new token is one.
    const lateStale = check(input(operations, [run('t1', 1_210, 11, 2), run('t1', 1_450, 10, 1)]))
    expect(lateStale.violations).toEqual([])
    expect(lateStale.limits).toEqual({
      'stale owner began its run after the new owner answered (lower token, fenced)': 1,
    })
    expect(check(input(operations, [...runs, run('t1', 1_450, 12, 3)])).violationsByKind).toEqual({
      'run-after-answer': 1,
    })
    // The stale owner's completion stored over the new owner's: two answers.
    const stale = [...operations]
    stale[0] = { ...(stale[0] as Operation), status: 201, code: undefined, responseHash: 'r1' }
    stale[3] = { ...(stale[3] as Operation), responseHash: 'r1' }
    const report = check(input(stale, runs))
    expect(report.violationsByKind).toEqual({ 'different-answers': 1 })
    expect(report.violations[0]?.detail).toContain('a stale completion')
  })

  it('on the resume route accepts a resumed run with the next token and counts its one charge; reports two charges, a 2xx naming another charge, a 2xx without one', () => {
    const resume = (fields: Partial<Operation> & Pick<Operation, 'start' | 'end' | 'status'>) =>
      op({ key: 'r1', route: '/resumes', ...fields })
    // Instance 0 (pid 10) charges, then is SIGKILLed at 500 ms; the client's retry on instance 1
    // waits out the lease (409), then resumes the run with token 2: the payment service answers
    // the first run's charge under the same derived key.
    const runs = [run('r1', 10, 10, 1), run('r1', 1_300, 11, 2)]
    const operations = resumedKey('r1')
    const charge = (id: string, customer = 'u0/r1') => ({ id, customer, amount: 1 })
    const checked = (charges: ReturnType<typeof charge>[], ops = operations, executions = runs) =>
      check(input(ops, executions, { instances: killedThenRestarted, charges }))

    // Another principal's charge under the same key string is that key's, not this one's.
    const good = checked([charge('ch_1'), charge('ch_9', 'u1/r1')])
    expect(good.violations).toEqual([])
    expect(good.routes['/resumes']).toEqual({ keys: 1, executions: 2, takenOver: 1, waitedReplays: 0 })
    expect(good.downstream).toEqual({
      charges: 2,
      keys: 1,
      chargedKeys: 1,
      resumedKeys: 1,
      resumedAfterKill: 1,
      stepsRun: 0,
      stepsSkipped: 0,
      stepsSkippedAfterKill: 0,
    })
    expect(good.limits).toEqual({})

    // The resumed run charged again (a key other than keyFor's): two charges for one key.
    const twice = checked([charge('ch_1'), charge('ch_2')])
    expect(twice.violationsByKind).toEqual({ 'double-charge': 1 })
    expect(twice.firstViolation).toContain('its charges at the payment service: ch_1, ch_2')

    // A 2xx naming a charge that is not the key's.
    const other = operations.map((operation, i) => (i === 3 ? { ...operation, charge: 'ch_2' } : operation))
    expect(checked([charge('ch_1')], other).violationsByKind).toEqual({ 'wrong-charge': 1 })

    // Answered 2xx, yet the payment service never charged the key.
    expect(checked([]).violationsByKind).toEqual({ 'missing-charge': 1, 'wrong-charge': 2 })

    // Two runs with one token: the claim was not held.
    expect(
      checked([charge('ch_1')], operations, [run('r1', 10, 10, 1), run('r1', 1_300, 11, 1)]).violationsByKind,
    ).toEqual({
      'duplicate-execution': 1,
    })

    // Left recovery-required: on a resume route no fault excuses it (the next retry resumes).
    const stuck = [
      ...operations.slice(0, 2),
      resume({ start: 20_000, end: 20_010, status: 503, code: 'IDEMPOTENCY_RECOVERY_REQUIRED', probe: true }),
    ]
    const stuckReport = checked([charge('ch_1')], stuck, runs.slice(0, 1))
    expect(stuckReport.violationsByKind).toEqual({ unsettled: 1 })
    // The same history on a recover route: a documented limit (the handler was killed mid-run).
    const onOrders = stuck.map((operation) => ({ ...operation, route: '/orders' as const }))
    const recoverReport = checked([], onOrders, runs.slice(0, 1))
    expect(recoverReport.violations).toEqual([])
    expect(recoverReport.limits).toEqual({ 'recovery-required: handler killed mid-run': 1 })
  })

  it('on PostgreSQL counts the re-runs that skipped the committed charge step; reports a step run twice, a step that returned another charge, and the order rows', () => {
    // Instance 0 (pid 10) commits the charge step, then is SIGKILLed at 500 ms; the retry on
    // instance 1 resumes with token 2, finds the step committed and answers with its charge.
    const instances = killedThenRestarted
    const runs = [run('p1', 10, 10, 1), run('p1', 1_300, 11, 2)]
    const step = (pid: number, token: number, ran: boolean, charge = 'ch_1'): StepLine => ({
      type: 'step',
      route: '/resumes',
      key: 'p1',
      user: 'u0',
      token,
      pid,
      step: 'charge',
      ran,
      charge,
      time: ORIGIN + 100 * token,
    })
    const operations = resumedKey('p1')
    const row = (charge = 'ch_1') => ({ key: 'p1', principal: 'u0', charge })
    const checked = (steps: StepLine[], resumeOrders = [row()]) =>
      check(
        input(operations, runs, {
          instances,
          charges: [{ id: 'ch_1', customer: 'u0/p1', amount: 1 }],
          steps,
          resumeOrders,
        }),
      )

    const good = checked([step(10, 1, true), step(11, 2, false)])
    expect(good.violations).toEqual([])
    expect(good.downstream).toMatchObject({
      stepsRun: 1,
      stepsSkipped: 1,
      stepsSkippedAfterKill: 1,
      resumedAfterKill: 1,
    })
    // The re-run called the payment service again though the charge's point was committed.
    expect(checked([step(10, 1, true), step(11, 2, true)]).violationsByKind).toEqual({ 'step-rerun': 1 })
    // The skipped step handed back another charge than the one committed.
    expect(checked([step(10, 1, true), step(11, 2, false, 'ch_2')]).violationsByKind).toEqual({ 'step-result': 1 })
    // The order row: one per key answered 2xx, naming the answer's charge.
    const steps = [step(10, 1, true), step(11, 2, false)]
    expect(checked(steps, []).violationsByKind).toEqual({ 'resume-rows': 1 })
    expect(checked(steps, [row(), row()]).violationsByKind).toEqual({ 'resume-rows': 1 })
    expect(checked(steps, [row('ch_2')]).violationsByKind).toEqual({ 'resume-rows': 1 })
    // A skip after a pause, not a kill, is counted as a skip only.
    const paused = instances.map((life) => (life.pid === 10 ? { ...life, killed: undefined } : life))
    const report = check(
      input(operations, runs, {
        instances: paused,
        charges: [{ id: 'ch_1', customer: 'u0/p1', amount: 1 }],
        steps,
        resumeOrders: [row()],
      }),
    )
    expect(report.downstream).toMatchObject({ stepsRun: 1, stepsSkipped: 1, stepsSkippedAfterKill: 0 })
  })

  it('counts a fault of the payment service as no excuse on the other routes: an early 409 on the waiting route is still one', () => {
    const wait = (fields: Partial<Operation> & Pick<Operation, 'start' | 'end' | 'status'>) =>
      op({ key: 'w1', route: '/waits', ...fields })
    const operations = [
      wait({ start: 0, end: 500, status: 201 }),
      wait({ start: 60, end: 80, status: 409, code: 'IDEMPOTENCY_IN_FLIGHT', instance: 2 }),
      wait({ start: 20_000, end: 20_010, status: 201, replayed: true, probe: true }),
    ]
    for (const kind of PAYMENTS_KINDS) {
      const report = check(input(operations, [run('w1', 10)], { faults: [{ kind, start: 30, end: 3_000 }] }))
      expect(report.violationsByKind).toEqual({ 'early-409': 1 })
      expect(report.faults).toEqual({ [kind]: 1 })
    }
  })

  it('on a waiting route reports a 409 sooner than waitMs with no fault, and counts the waited replays', () => {
    const wait = (fields: Partial<Operation> & Pick<Operation, 'start' | 'end' | 'status'>) =>
      op({ key: 'w1', route: '/waits', ...fields })
    const operations = [
      wait({ start: 0, end: 500, status: 201 }),
      wait({ start: 50, end: 510, status: 201, replayed: true, instance: 1 }),
      wait({ start: 20_000, end: 20_010, status: 201, replayed: true, probe: true }),
    ]
    const good = check(input(operations, [run('w1', 10)]))
    expect(good.violations).toEqual([])
    expect(good.routes['/waits']?.waitedReplays).toBe(1)
    const early = [...operations, wait({ start: 60, end: 80, status: 409, code: 'IDEMPOTENCY_IN_FLIGHT', instance: 2 })]
    expect(check(input(early, [run('w1', 10)])).violationsByKind).toEqual({ 'early-409': 1 })
    // After waiting waitMs, or while a fault was active, a 409 is what the route documents.
    const late = [...operations, wait({ start: 60, end: 2_100, status: 409, code: 'IDEMPOTENCY_IN_FLIGHT' })]
    expect(check(input(late, [run('w1', 10)])).violations).toEqual([])
    const faults = [{ kind: 'proxy-drop' as const, start: 30, end: 3_000, instance: 2 }]
    expect(check(input(early, [run('w1', 10)], { faults })).violations).toEqual([])
    // A step of the store's clock keeps the store answering: it excuses no early 409.
    const step = [{ kind: 'clock-step' as const, start: 30, end: 3_000 }]
    expect(check(input(early, [run('w1', 10)], { faults: step })).violationsByKind).toEqual({ 'early-409': 1 })
  })

  it("reports each clock step's 409 window: the 409s until 10 s after its heal, and the longest a key got them", () => {
    const { operations, executions } = goodKey('k1')
    // k2 is held past a step back: answered 409 from 1 s to 7.5 s; k3 once, long after the step.
    const held = [
      op({ key: 'k2', start: 1_000, end: 1_010, status: 409, code: 'IDEMPOTENCY_IN_FLIGHT' }),
      op({ key: 'k2', start: 4_000, end: 4_010, status: 409, code: 'IDEMPOTENCY_IN_FLIGHT' }),
      op({ key: 'k2', start: 7_490, end: 7_500, status: 409, code: 'IDEMPOTENCY_IN_FLIGHT' }),
      op({ key: 'k2', start: 8_000, end: 8_100, status: 201 }),
      op({ key: 'k2', start: 20_000, end: 20_010, status: 201, replayed: true, probe: true }),
      op({ key: 'k3', start: 30_000, end: 30_010, status: 409, code: 'IDEMPOTENCY_IN_FLIGHT' }),
      op({ key: 'k3', start: 30_500, end: 30_600, status: 201 }),
      op({ key: 'k3', start: 40_000, end: 40_010, status: 201, replayed: true, probe: true }),
    ]
    const faults = [{ kind: 'clock-step' as const, start: 500, end: 5_000, detail: 'clock +4000 ms' }]
    const report = check(
      input([...operations, ...held], [...executions, run('k2', 8_010), run('k3', 30_510)], { faults }),
    )
    expect(report.violations).toEqual([])
    expect(report.faults).toEqual({ 'clock-step': 1 })
    expect(report.clock?.steps).toEqual([
      {
        start: 500,
        end: 5_000,
        detail: 'clock +4000 ms',
        answers409: 3,
        keys: 1,
        longestMs: 6_500,
        longestKey: 'u0/k2',
        recoveryRequired: 0,
      },
    ])
    // k1's 409 is before the step; k3's long after its window.
    expect(report.clock?.elsewhereLongestMs).toBe(10)
    expect(check(input([...operations, ...held], executions)).clock).toBeUndefined()
  })

  it('counts documented limits beside the violations, with their reason', () => {
    // Recovery-required after the handler's process was killed mid-run.
    const killedRun = [
      op({ key: 'k2', start: 0, end: 500, status: 0, outcome: 'error', instance: 1 }),
      op({ key: 'k2', start: 20_000, end: 20_010, status: 503, code: 'IDEMPOTENCY_RECOVERY_REQUIRED', probe: true }),
    ]
    const dead = alive.map((life) => (life.instance === 1 ? { ...life, killed: 400 } : life))
    const recovery = check(input(killedRun, [run('k2', 10, 11)], { instances: dead }))
    expect(recovery.violations).toEqual([])
    expect(recovery.limits).toEqual({ 'recovery-required: handler killed mid-run': 1 })
    // An answer lost across a Redis failover: a violation with durability, a limit without.
    const { operations, executions } = goodKey('k1')
    operations[2] = { ...(operations[2] as Operation), status: 201, replayed: false, responseHash: 'r2-k1' }
    const failover = [{ kind: 'sentinel-failover' as const, start: 150, end: 190 }]
    expect(check(input(operations, executions, { faults: failover })).violationsByKind).toEqual({
      'different-answers': 1,
    })
    const unsafe = check(input(operations, executions, { faults: failover, unsafeFailover: true }))
    expect(unsafe.violations).toEqual([])
    expect(unsafe.limits).toEqual({ 'unsafe Redis failover without durability: different-answers': 1 })
    // Unless no failover touched the key.
    expect(check(input(operations, executions, { unsafeFailover: true })).violationsByKind).toEqual({
      'different-answers': 1,
    })
  })

  it('checks deposits exactly once: one row per key answered 2xx, and the balance', () => {
    const deposit = (key: string, status: number, extra: Partial<Operation> = {}) =>
      op({ key, route: '/deposits', start: 0, end: 100, status, account: 'a1', amount: 5, ...extra })
    const operations = [
      deposit('d1', 201),
      deposit('d1', 201, { start: 20_000, end: 20_010, replayed: true, probe: true }),
      deposit('d2', 503, { code: 'IDEMPOTENCY_STORE_UNAVAILABLE' }),
      deposit('d2', 201, { start: 20_000, end: 20_010, probe: true, amount: 5 }),
    ]
    const rows = [
      { key: 'd1', principal: 'u0', account: 'a1', amount: 5 },
      { key: 'd2', principal: 'u0', account: 'a1', amount: 5 },
    ]
    const good = check(input(operations, [], { deposits: rows, balances: [{ account: 'a1', balance: 10 }] }))
    expect(good.violations).toEqual([])
    const doubled = check(
      input(operations, [], {
        deposits: [...rows, { key: 'd2', principal: 'u0', account: 'a1', amount: 5 }],
        balances: [{ account: 'a1', balance: 15 }],
      }),
    )
    expect(doubled.violationsByKind).toEqual({ 'deposit-rows': 2, balance: 1 })
  })

  it('makes the same schedule from the same seed, and another from another seed', () => {
    const options = { store: 'redis', durationMs: 120_000 } as const
    const first = makeSchedule({ seed: 7, ...options })
    expect(makeSchedule({ seed: 7, ...options })).toEqual(first)
    expect(makeSchedule({ seed: 8, ...options })).not.toEqual(first)
    for (const fault of first) {
      expect(fault.at).toBeGreaterThanOrEqual(3_000)
      expect(fault.at + fault.durationMs).toBeLessThanOrEqual(120_000 - 12_000)
    }
    const ha = makeSchedule({ seed: 7, store: 'postgres-ha', durationMs: 120_000 })
    expect(ha.filter((fault) => fault.kind === 'promote')).toHaveLength(1)
    expect(makeSchedule({ seed: 7, store: 'postgres', durationMs: 120_000 }).map((fault) => fault.kind)).not.toContain(
      'script-flush',
    )
    // Clock steps, in the modes whose store runs under the clock shim, each with its step of 1-6 s.
    const steps = makeSchedule({ seed: 7, store: 'redis', durationMs: 600_000 }).filter(
      (fault) => fault.kind === 'clock-step',
    )
    expect(steps.length).toBeGreaterThan(0)
    for (const step of steps) expect(Math.abs(step.stepMs ?? 0)).toBeGreaterThanOrEqual(1_000)
    // Every store mode runs its store under the shim now; cluster and postgres-ha step it too.
    for (const store of ['cluster', 'postgres-ha', 'sentinel', 'postgres'] as const)
      expect(makeSchedule({ seed: 7, store, durationMs: 600_000 }).map((fault) => fault.kind)).toContain('clock-step')
  })

  it('gives every third fault to the payment service, in every mode, leaving the others as the seed drew them', () => {
    for (const store of ['redis', 'postgres', 'sentinel', 'cluster', 'postgres-ha'] as const) {
      const faults = makeSchedule({ seed: 7, store, durationMs: 120_000 })
      const payments = faults.filter((fault) => PAYMENTS_KINDS.includes(fault.kind))
      expect(payments.length).toBeGreaterThanOrEqual(Math.floor(faults.length / 3) - 1)
      // The second fault, early in a short run, or the next with a window after an instant one
      // (the promotion may take its slot on postgres-ha).
      if (store !== 'postgres-ha')
        expect(PAYMENTS_KINDS).toContain(faults.slice(1).find((fault) => !INSTANT.has(fault.kind))?.kind)
      for (const fault of payments) {
        expect(fault.durationMs).toBeGreaterThanOrEqual(500)
        expect(fault.instance).toBeUndefined()
        expect(fault.delayMs !== undefined).toBe(fault.kind === 'payments-latency')
      }
    }
    // The seed set's runs: the same store faults at the same offsets as before the payment
    // service had faults, its own in the slots given to it.
    const kinds = (seed: number, store: 'redis' | 'cluster' | 'postgres-ha', durationMs: number) =>
      makeSchedule({ seed, store, durationMs }).map((fault) => `${fault.kind}@${fault.at}`)
    expect(kinds(10, 'redis', 25_000)).toEqual(['clock-step@3502', 'payments-half-open@10010'])
    expect(kinds(115, 'cluster', 35_000)).toEqual(['clock-step@3268', 'payments-drop@11306', 'reshard@17468'])
    expect(kinds(24, 'postgres-ha', 25_000)).toEqual(['clock-step@3332', 'promote@7389'])
    expect(kinds(1, 'redis', 35_000)).toEqual([
      'instance-kill@3627',
      'payments-drop@10438',
      'script-flush@17137',
      'client-kill@20127',
      'payments-pause@22105',
    ])
  })

  it('draws every request and every fault window', () => {
    const { operations } = goodKey('k1')
    const faults = [{ kind: 'store-pause' as const, start: 50, end: 150 }]
    const latency = latencyPlot(operations, faults, 'test')
    expect(latency.match(/<circle /g)).toHaveLength(operations.length)
    expect(latency).toContain('store-pause')
    expect(throughputPlot(operations, faults, 'test')).toContain('<polyline')
  })
})
