/**
 * A pure reference model of the store contract (docs/design.md §3) and of `execute()` (docs/design.md §4), and the
 * fast-check commands that drive a real Redis store and the model side by side (fault 2).
 *
 * Time is Redis's own: every command is bracketed by two `TIME` readings, so the server time
 * the script used lies in [n0, n1]. Every instant the model keeps (lease end, expiry) is an
 * interval, pinned to the exact value as soon as a reply shows it. A decision that depends on
 * time ("is the lease live?") is taken in every way the intervals allow, and the real reply
 * must match one of those branches; that branch's state becomes the model's. So leases,
 * replay windows and retention really run out, on real time, without a fake clock.
 */
import { randomBytes } from 'node:crypto'
import fc from 'fast-check'
import type { Redis } from 'ioredis'
import { jsonCodec } from '../../src/core/codec.js'
import { execute } from '../../src/core/executor.js'
import type { ExecuteOutcome } from '../../src/core/outcomes.js'
import { resolvePolicy } from '../../src/core/policy.js'
import type { RecordState } from '../../src/core/record.js'
import type { IdempotencyStore, OwnerRef } from '../../src/core/store.js'
import { serverNow } from './redis-time.js'
import { sleep } from './sleep.js'

/** Lease, failure retention and replay window of every model record, in ms (short: they really run out). */
export const LEASE_MS = 30
export const RETENTION_MS = 45
export const REPLAY_MS = 70
const TIMES = { leaseMs: LEASE_MS, failureRetentionMs: RETENTION_MS, replayWindowMs: REPLAY_MS }
/** How much earlier than the lease set an acquiring claim may report its end (store-contract.ts allows 1 s). */
const REPORTED_LEASE_SLACK_MS = 1_000
/** Owner tokens the raw store commands use; executions use fresh tokens of their own. */
const OWNERS = [0, 1, 2].map(() => randomBytes(32).toString('hex'))
const FINGERPRINTS = ['fp-a', 'fp-b']
/** Responses raw completes store: two the executor's codec reads, two it cannot. */
const RESPONSES = ['{"v":"raw-1"}', '{"v":"raw-2"}', '', 'not json']
const JSON_CODEC = jsonCodec<{ v: string | number }>()
/** The model keeps responses as text; the codec's bytes are compared as UTF-8 text. */
const CODEC = {
  id: JSON_CODEC.id,
  encodeText: (value: { v: string | number }) => JSON_CODEC.encode(value).toString('utf8'),
  decodeText: (text: string) => JSON_CODEC.decode(Buffer.from(text, 'utf8'), JSON_CODEC.id),
}

/** A store reply with its stored response as UTF-8 text, as the model keeps it. */
function textual(reply: Record<string, unknown>): Record<string, unknown> {
  const response = reply?.response
  return Buffer.isBuffer(response) ? { ...reply, response: response.toString('utf8') } : reply
}
const OPERATION = 'model-op'

type Interval = readonly [number, number]

interface ModelRecord {
  readonly state: RecordState
  /** Index into OWNERS, or a negative number for an execution's own token. */
  readonly owner: number
  readonly attempt: number
  readonly rev: number
  readonly fp: string
  /** CLAIMED and EXECUTING: expiry is leaseUntil + RETENTION_MS. */
  readonly leaseUntil: Interval
  /** COMPLETED (= replayUntil), FAILED_RETRYABLE and ABANDONED. */
  readonly expiresAt: Interval
  readonly resp?: string
}

export interface Model {
  /** One slot per key. */
  records: (ModelRecord | undefined)[]
  /** Counts of what the run did, for the figures. */
  readonly stats: Record<string, number>
}

export interface Real {
  readonly store: IdempotencyStore
  readonly redis: Redis
  readonly keys: readonly string[]
}

export const KEYS_PER_RUN = 2

/** Whether `x > now` for some now in [n0, n1]: definitely, definitely not, or either. */
function later(x: Interval, n0: number, n1: number): boolean[] {
  if (x[0] > n1) return [true]
  if (x[1] <= n0) return [false]
  return [true, false]
}

function expiresAt(record: ModelRecord): Interval {
  return record.state === 'CLAIMED' || record.state === 'EXECUTING'
    ? [record.leaseUntil[0] + RETENTION_MS, record.leaseUntil[1] + RETENTION_MS]
    : record.expiresAt
}

interface Seen {
  readonly present: boolean
  readonly leaseLive: boolean
}

/** Every way the record can read at some instant in [n0, n1] (docs/design.md §3 classify). */
function readings(record: ModelRecord | undefined, n0: number, n1: number): Seen[] {
  if (record === undefined) return [{ present: false, leaseLive: false }]
  const out: Seen[] = []
  for (const alive of later(expiresAt(record), n0, n1)) {
    if (!alive) {
      out.push({ present: false, leaseLive: false })
      continue
    }
    for (const live of later(record.leaseUntil, n0, n1)) out.push({ present: true, leaseLive: live })
  }
  return out
}

/** A branch: what the reply must be, and the model's record after it. */
interface Branch {
  readonly label: string
  /** A reason when `actual` does not fit this branch. */
  check(actual: Record<string, unknown>): string | undefined
  next(actual: Record<string, unknown>): ModelRecord | undefined
}

/** Checks exact fields and, for `within`, that a number lies in an interval. */
function fits(
  actual: Record<string, unknown>,
  exact: Record<string, unknown>,
  within: Record<string, Interval> = {},
): string | undefined {
  const keys = new Set([...Object.keys(exact), ...Object.keys(within)])
  for (const key of Object.keys(actual)) {
    if (!keys.has(key)) return `unexpected field ${key}`
  }
  for (const [key, value] of Object.entries(exact)) {
    if (actual[key] !== value) return `${key}: expected ${JSON.stringify(value)}, got ${JSON.stringify(actual[key])}`
  }
  for (const [key, [lo, hi]] of Object.entries(within)) {
    const value = actual[key]
    if (typeof value !== 'number' || value < lo || value > hi)
      return `${key}: expected ${lo}..${hi}, got ${String(value)}`
  }
  return undefined
}

function pin(value: unknown): Interval {
  return [value as number, value as number]
}

function remaining(leaseUntil: Interval, n0: number, n1: number): Interval {
  return [Math.max(1, leaseUntil[0] - n1), leaseUntil[1] - n0]
}

/** Runs `call` between two TIME readings and settles the model on the branch the reply fits. */
async function bracket(
  model: Model,
  real: Real,
  k: number,
  describe: string,
  call: () => Promise<unknown>,
  branches: (record: ModelRecord | undefined, n0: number, n1: number) => Branch[],
): Promise<Record<string, unknown>> {
  const n0 = await serverNow(real.redis)
  const actual = textual((await call()) as Record<string, unknown>)
  const n1 = await serverNow(real.redis)
  const candidates = branches(model.records[k], n0, n1)
  const reasons: string[] = []
  for (const branch of candidates) {
    const reason = branch.check(actual)
    if (reason === undefined) {
      model.records[k] = branch.next(actual)
      model.stats[branch.label] = (model.stats[branch.label] ?? 0) + 1
      return actual
    }
    reasons.push(`${branch.label}: ${reason}`)
  }
  throw new Error(
    `${describe} on key ${k}: the reply ${JSON.stringify(actual)} fits no branch of the model ` +
      `(record ${JSON.stringify(model.records[k])}, server time ${n0}..${n1}): ${reasons.join('; ')}`,
  )
}

// --- claim: docs/design.md §3 steps 1-8 -------------------------------------------------------------

interface ClaimShape {
  readonly owner: number
  readonly fp: string
  readonly start: boolean
  readonly takeover: boolean
}

/**
 * The claim's branches. `held` turns a held result (ACQUIRED, TAKEN_OVER, REPLAYED_ACQUIRE)
 * into a branch: the raw claim checks the reply; an execution continues with its action.
 */
function claimBranches(
  claim: ClaimShape,
  record: ModelRecord | undefined,
  n0: number,
  n1: number,
  held: (label: string, exact: Record<string, unknown>, within: Record<string, Interval>, base: ModelRecord) => Branch,
  answer: (
    label: string,
    exact: Record<string, unknown>,
    within?: Record<string, Interval>,
    after?: (actual: Record<string, unknown>) => ModelRecord | undefined,
  ) => Branch,
): Branch[] {
  const out: Branch[] = []
  const state = claim.start ? 'EXECUTING' : 'CLAIMED'
  const fresh: Interval = [n0 + LEASE_MS, n1 + LEASE_MS]
  for (const seen of readings(record, n0, n1)) {
    if (!seen.present || record === undefined) {
      const base: ModelRecord = {
        state,
        owner: claim.owner,
        attempt: 1,
        rev: 1,
        fp: claim.fp,
        leaseUntil: fresh,
        expiresAt: fresh,
      }
      // The lease end an acquiring claim reports may be a lower bound of the one set (the Redis
      // store's, from its sample of Redis's clock): never later, and within the contract's 1 s.
      const reported: Interval = [fresh[0] - REPORTED_LEASE_SLACK_MS, fresh[1]]
      out.push(held('claim: acquired', { kind: 'ACQUIRED', state, attempt: 1, rev: 1 }, { leaseUntil: reported }, base))
      continue
    }
    if (record.fp !== claim.fp) {
      out.push(answer('claim: fingerprint mismatch', { kind: 'FINGERPRINT_MISMATCH' }))
    } else if (record.state === 'COMPLETED') {
      out.push(
        answer(
          'claim: replay',
          { kind: 'COMPLETED_REPLAY', response: record.resp, codec: CODEC.id, policy: '1' },
          { replayUntil: record.expiresAt },
          (actual) => ({ ...record, expiresAt: pin(actual.replayUntil) }),
        ),
      )
    } else if (record.state === 'ABANDONED') {
      out.push(answer('claim: abandoned', { kind: 'RECOVERY_REQUIRED', reason: 'ABANDONED' }))
    } else if (record.owner === claim.owner && (record.state === 'CLAIMED' || record.state === 'EXECUTING')) {
      out.push(
        held(
          'claim: own claim replayed',
          { kind: 'REPLAYED_ACQUIRE', state: record.state, attempt: record.attempt, rev: record.rev },
          { leaseUntil: record.leaseUntil },
          record,
        ),
      )
    } else if (
      record.state === 'FAILED_RETRYABLE' ||
      (record.state === 'CLAIMED' && !seen.leaseLive) ||
      (record.state === 'EXECUTING' && !seen.leaseLive && claim.takeover)
    ) {
      const base: ModelRecord = {
        state,
        owner: claim.owner,
        attempt: record.attempt + 1,
        rev: record.rev + 1,
        fp: claim.fp,
        leaseUntil: fresh,
        expiresAt: fresh,
      }
      out.push(
        held(
          'claim: taken over',
          { kind: 'TAKEN_OVER', state, attempt: base.attempt, rev: base.rev },
          { leaseUntil: fresh },
          base,
        ),
      )
    } else if (record.state === 'EXECUTING' && !seen.leaseLive) {
      out.push(answer('claim: expired execution', { kind: 'RECOVERY_REQUIRED', reason: 'EXPIRED_EXECUTION' }))
    } else {
      out.push(
        answer('claim: in progress', { kind: 'IN_PROGRESS' }, { retryAfterMs: remaining(record.leaseUntil, n0, n1) }),
      )
    }
  }
  return out
}

function keep(record: ModelRecord | undefined) {
  return () => record
}

// --- transitions: compare-and-set with the ALREADY rule ------------------------------------

interface RefShape {
  readonly owner: number
  readonly attempt: number
  readonly rev: number
}

function transitionBranches(
  name: string,
  ref: RefShape,
  from: RecordState,
  to: RecordState | undefined,
  record: ModelRecord | undefined,
  n0: number,
  n1: number,
  apply: (record: ModelRecord) => {
    exact: Record<string, unknown>
    within?: Record<string, Interval>
    next: (actual: Record<string, unknown>) => ModelRecord | undefined
  },
): Branch[] {
  const out: Branch[] = []
  const simple = (label: string, exact: Record<string, unknown>): Branch => ({
    label: `${name}: ${label}`,
    check: (actual) => fits(actual, exact),
    next: keep(record),
  })
  for (const seen of readings(record, n0, n1)) {
    if (!seen.present || record === undefined) out.push(simple('not found', { kind: 'NOT_FOUND' }))
    else if (record.owner !== ref.owner || record.attempt !== ref.attempt)
      out.push(simple('not owner', { kind: 'NOT_OWNER' }))
    else if (to !== undefined && record.state === to && record.rev === ref.rev + 1) {
      out.push(simple('already', { kind: 'ALREADY', rev: record.rev }))
    } else if (record.state !== from || record.rev !== ref.rev) {
      out.push(simple('wrong state', { kind: 'WRONG_STATE', state: record.state }))
    } else {
      const applied = apply(record)
      out.push({
        label: `${name}: ok`,
        check: (actual) => fits(actual, applied.exact, applied.within),
        next: applied.next,
      })
    }
  }
  return out
}

/** `HOLDER` as an owner picks the record's own owner (when a raw command holds it), so transitions often apply. */
export const HOLDER = -1

function refFor(model: Model, k: number, owner: number, dAttempt: number, dRev: number): RefShape {
  const record = model.records[k]
  return {
    owner: owner === HOLDER ? Math.max(0, record?.owner ?? 0) : owner,
    attempt: Math.max(1, (record?.attempt ?? 1) + dAttempt),
    rev: Math.max(1, (record?.rev ?? 1) + dRev),
  }
}

function ownerRef(real: Real, k: number, ref: RefShape): OwnerRef {
  return { key: real.keys[k] as string, owner: OWNERS[ref.owner] as string, attempt: ref.attempt, rev: ref.rev }
}

// --- the commands ----------------------------------------------------------------------------

type Cmd = fc.AsyncCommand<Model, Real, false>

export class ClaimCommand implements Cmd {
  constructor(
    readonly k: number,
    readonly owner: number,
    readonly fp: number,
    readonly start: boolean,
    readonly takeover: boolean,
    /** A claim that will wait (`inFlight`): on Redis it marks a record in progress; the model answers the same. */
    readonly wait = false,
  ) {}
  check = () => true
  async run(model: Model, real: Real): Promise<void> {
    const claim: ClaimShape = {
      owner: this.owner,
      fp: FINGERPRINTS[this.fp] as string,
      start: this.start,
      takeover: this.takeover,
    }
    await bracket(
      model,
      real,
      this.k,
      this.toString(),
      () =>
        real.store.claim({
          key: real.keys[this.k] as string,
          owner: OWNERS[this.owner] as string,
          fingerprint: claim.fp,
          operation: OPERATION,
          codec: CODEC.id,
          policy: '1',
          start: this.start,
          expiredExecution: this.takeover ? 'takeover' : 'recover',
          wait: this.wait,
          ...TIMES,
        }),
      (record, n0, n1) =>
        claimBranches(
          claim,
          record,
          n0,
          n1,
          (label, exact, within, base) => ({
            label,
            check: (actual) => fits(actual, exact, within),
            // A reported lower bound narrows the lease set to no earlier than it; any other
            // held answer reports the lease end exactly.
            next: (actual) => ({
              ...base,
              leaseUntil:
                label === 'claim: acquired'
                  ? [Math.max(actual.leaseUntil as number, base.leaseUntil[0]), base.leaseUntil[1]]
                  : pin(actual.leaseUntil),
            }),
          }),
          (label, exact, within, after) => ({
            label,
            check: (actual) => fits(actual, exact, within),
            next: after ?? keep(record),
          }),
        ),
    )
  }
  toString = () =>
    `claim(k${this.k}, o${this.owner}, ${FINGERPRINTS[this.fp]}, start=${this.start}, takeover=${this.takeover}, wait=${this.wait})`
}

export class StartCommand implements Cmd {
  constructor(
    readonly k: number,
    readonly owner: number,
    readonly dAttempt: number,
    readonly dRev: number,
  ) {}
  check = () => true
  async run(model: Model, real: Real): Promise<void> {
    const ref = refFor(model, this.k, this.owner, this.dAttempt, this.dRev)
    await bracket(
      model,
      real,
      this.k,
      `${this.toString()} ${JSON.stringify(ref)}`,
      () => real.store.start(ownerRef(real, this.k, ref), TIMES),
      (record, n0, n1) =>
        transitionBranches('start', ref, 'CLAIMED', 'EXECUTING', record, n0, n1, (rec) => ({
          exact: { kind: 'OK', rev: rec.rev + 1 },
          next: () => ({ ...rec, state: 'EXECUTING', rev: rec.rev + 1, leaseUntil: [n0 + LEASE_MS, n1 + LEASE_MS] }),
        })),
    )
  }
  toString = () => `start(k${this.k}, ${who(this.owner)}, attempt${signed(this.dAttempt)}, rev${signed(this.dRev)})`
}

export class CompleteCommand implements Cmd {
  constructor(
    readonly k: number,
    readonly owner: number,
    readonly dAttempt: number,
    readonly dRev: number,
    readonly response: number,
  ) {}
  check = () => true
  async run(model: Model, real: Real): Promise<void> {
    const ref = refFor(model, this.k, this.owner, this.dAttempt, this.dRev)
    const resp = RESPONSES[this.response] as string
    await bracket(
      model,
      real,
      this.k,
      `${this.toString()} ${JSON.stringify(ref)}`,
      () => real.store.complete(ownerRef(real, this.k, ref), Buffer.from(resp, 'utf8'), TIMES),
      (record, n0, n1) =>
        transitionBranches('complete', ref, 'EXECUTING', 'COMPLETED', record, n0, n1, (rec) => ({
          exact: { kind: 'OK', rev: rec.rev + 1 },
          next: () => ({
            ...rec,
            state: 'COMPLETED',
            rev: rec.rev + 1,
            resp,
            expiresAt: [n0 + REPLAY_MS, n1 + REPLAY_MS],
          }),
        })),
    )
  }
  toString = () =>
    `complete(k${this.k}, ${who(this.owner)}, attempt${signed(this.dAttempt)}, rev${signed(this.dRev)}, ${JSON.stringify(RESPONSES[this.response])})`
}

export class MarkFailedCommand implements Cmd {
  constructor(
    readonly k: number,
    readonly owner: number,
    readonly dAttempt: number,
    readonly dRev: number,
    readonly retryable: boolean,
  ) {}
  check = () => true
  async run(model: Model, real: Real): Promise<void> {
    const ref = refFor(model, this.k, this.owner, this.dAttempt, this.dRev)
    const target: RecordState = this.retryable ? 'FAILED_RETRYABLE' : 'ABANDONED'
    await bracket(
      model,
      real,
      this.k,
      `${this.toString()} ${JSON.stringify(ref)}`,
      () => real.store.markFailed(ownerRef(real, this.k, ref), this.retryable ? 'retryable' : 'unknown', TIMES),
      (record, n0, n1) =>
        transitionBranches('markFailed', ref, 'EXECUTING', target, record, n0, n1, (rec) => ({
          exact: { kind: 'OK', rev: rec.rev + 1 },
          next: () => ({ ...rec, state: target, rev: rec.rev + 1, expiresAt: [n0 + RETENTION_MS, n1 + RETENTION_MS] }),
        })),
    )
  }
  toString = () =>
    `markFailed(k${this.k}, ${who(this.owner)}, attempt${signed(this.dAttempt)}, rev${signed(this.dRev)}, ${this.retryable ? 'retryable' : 'unknown'})`
}

export class ReleaseCommand implements Cmd {
  constructor(
    readonly k: number,
    readonly owner: number,
    readonly dAttempt: number,
    readonly dRev: number,
  ) {}
  check = () => true
  async run(model: Model, real: Real): Promise<void> {
    const ref = refFor(model, this.k, this.owner, this.dAttempt, this.dRev)
    await bracket(
      model,
      real,
      this.k,
      `${this.toString()} ${JSON.stringify(ref)}`,
      () => real.store.release(ownerRef(real, this.k, ref)),
      (record, n0, n1) =>
        transitionBranches('release', ref, 'CLAIMED', undefined, record, n0, n1, () => ({
          exact: { kind: 'OK', rev: 0 },
          next: () => undefined,
        })),
    )
  }
  toString = () => `release(k${this.k}, ${who(this.owner)}, attempt${signed(this.dAttempt)}, rev${signed(this.dRev)})`
}

export class RenewCommand implements Cmd {
  constructor(
    readonly k: number,
    readonly owner: number,
    readonly dAttempt: number,
  ) {}
  check = () => true
  async run(model: Model, real: Real): Promise<void> {
    const ref = refFor(model, this.k, this.owner, this.dAttempt, 0)
    await bracket(
      model,
      real,
      this.k,
      `${this.toString()} ${JSON.stringify(ref)}`,
      () => real.store.renew(ownerRef(real, this.k, ref), TIMES),
      (record, n0, n1) => {
        const out: Branch[] = []
        const simple = (label: string, exact: Record<string, unknown>): Branch => ({
          label: `renew: ${label}`,
          check: (actual) => fits(actual, exact),
          next: keep(record),
        })
        for (const seen of readings(record, n0, n1)) {
          if (!seen.present || record === undefined) out.push(simple('not found', { kind: 'NOT_FOUND' }))
          else if (record.owner !== ref.owner || record.attempt !== ref.attempt)
            out.push(simple('not owner', { kind: 'NOT_OWNER' }))
          else if (record.state !== 'EXECUTING')
            out.push(simple('wrong state', { kind: 'WRONG_STATE', state: record.state }))
          else {
            const fresh: Interval = [n0 + LEASE_MS, n1 + LEASE_MS]
            out.push({
              label: 'renew: ok',
              check: (actual) => fits(actual, { kind: 'OK' }, { leaseUntil: fresh }),
              next: (actual) => ({ ...record, leaseUntil: pin(actual.leaseUntil) }),
            })
          }
        }
        return out
      },
    )
  }
  toString = () => `renew(k${this.k}, ${who(this.owner)}, attempt${signed(this.dAttempt)})`
}

export class InspectCommand implements Cmd {
  constructor(
    readonly k: number,
    readonly owner: number,
  ) {}
  check = () => true
  async run(model: Model, real: Real): Promise<void> {
    await bracket(
      model,
      real,
      this.k,
      this.toString(),
      () => real.store.inspect(real.keys[this.k] as string, OWNERS[this.owner] as string),
      (record, n0, n1) => {
        const out: Branch[] = []
        for (const seen of readings(record, n0, n1)) {
          if (!seen.present || record === undefined) {
            out.push({
              label: 'inspect: absent',
              check: (actual) => fits(actual, { kind: 'ABSENT' }),
              next: keep(record),
            })
            continue
          }
          const common = {
            kind: record.state,
            mine: record.owner === this.owner,
            attempt: record.attempt,
            rev: record.rev,
            fingerprint: record.fp,
            operation: OPERATION,
          }
          if (record.state === 'CLAIMED' || record.state === 'EXECUTING') {
            const left = seen.leaseLive ? remaining(record.leaseUntil, n0, n1) : ([0, 0] as Interval)
            out.push({
              label: `inspect: ${record.state.toLowerCase()}`,
              check: (actual) => fits(actual, common, { leaseUntil: record.leaseUntil, leaseRemainingMs: left }),
              next: (actual) => ({ ...record, leaseUntil: pin(actual.leaseUntil) }),
            })
          } else if (record.state === 'COMPLETED') {
            out.push({
              label: 'inspect: completed',
              check: (actual) =>
                fits(
                  actual,
                  { ...common, response: record.resp, codec: CODEC.id, policy: '1' },
                  { replayUntil: record.expiresAt },
                ),
              next: (actual) => ({ ...record, expiresAt: pin(actual.replayUntil) }),
            })
          } else {
            out.push({
              label: `inspect: ${record.state.toLowerCase()}`,
              check: (actual) => fits(actual, common),
              next: keep(record),
            })
          }
        }
        return out
      },
    )
  }
  toString = () => `inspect(k${this.k}, o${this.owner})`
}

/** Lets server time pass: leases, retention and replay windows run out for real. */
export class WaitCommand implements Cmd {
  constructor(readonly ms: number) {}
  check = () => true
  async run(model: Model): Promise<void> {
    model.stats.waits = (model.stats.waits ?? 0) + 1
    await sleep(this.ms)
  }
  toString = () => `wait(${this.ms} ms)`
}

let executionOwner = -1

/**
 * One `execute()` on the real store (a fresh owner token, as every invocation has), with an
 * action that completes, fails retryably or fails with an unknown effect. The model predicts
 * the outcome, whether the action runs (exactly once, or not at all) and the record after it.
 */
export class ExecuteCommand implements Cmd {
  constructor(
    readonly k: number,
    readonly fp: number,
    readonly result: 'complete' | 'retryable' | 'unknown',
    readonly takeover: boolean,
    readonly startSeparately: boolean,
  ) {}
  check = () => true
  async run(model: Model, real: Real): Promise<void> {
    const owner = executionOwner--
    let runs = 0
    const value = { v: `exec${owner}` }
    const claim: ClaimShape = {
      owner,
      fp: FINGERPRINTS[this.fp] as string,
      start: !this.startSeparately,
      takeover: this.takeover,
    }
    const n0 = await serverNow(real.redis)
    const outcome = await execute<{ v: string | number }>({
      store: real.store,
      key: real.keys[this.k] as string,
      operation: OPERATION,
      fingerprint: claim.fp,
      codec: JSON_CODEC,
      policy: resolvePolicy({ ...TIMES, expiredExecution: this.takeover ? 'takeover' : 'recover' }),
      startSeparately: this.startSeparately,
      // The model's IN_PROGRESS carries the lease left: a Retry-After bounded only by it.
      inProgressRetryAfterMs: Number.MAX_SAFE_INTEGER,
      action: () => {
        runs++
        if (this.result === 'retryable') throw Object.assign(new Error('retry me'), { retryable: true })
        if (this.result === 'unknown') throw new Error('unknown effect')
        return value
      },
    })
    const n1 = await serverNow(real.redis)
    const actual = { ...summariseOutcome(outcome), runs }
    const record = model.records[this.k]
    const branches = claimBranches(
      claim,
      record,
      n0,
      n1,
      (label, _exact, _within, base) => {
        // Held: the action runs once, then its outcome is recorded.
        const rev = base.rev + (this.startSeparately ? 1 : 0) + 1
        const expected =
          this.result === 'complete'
            ? { kind: 'EXECUTED', value: CODEC.encodeText(value), attempt: base.attempt, runs: 1 }
            : { kind: 'FAILED', classification: this.result, recorded: true, attempt: base.attempt, runs: 1 }
        const state: RecordState =
          this.result === 'complete' ? 'COMPLETED' : this.result === 'retryable' ? 'FAILED_RETRYABLE' : 'ABANDONED'
        const window = this.result === 'complete' ? REPLAY_MS : RETENTION_MS
        return {
          label: `execute: ${label.replace('claim: ', '')}, ran, ${state.toLowerCase()}`,
          check: (got) => fits(got, expected),
          next: () => ({
            ...base,
            state,
            rev,
            resp: this.result === 'complete' ? CODEC.encodeText(value) : undefined,
            leaseUntil: [n0 + LEASE_MS, n1 + LEASE_MS],
            expiresAt: [n0 + window, n1 + window],
          }),
        }
      },
      (label, exact, within, after) => {
        const expected = expectedWithoutRun(exact)
        return {
          label: `execute: ${label.replace('claim: ', '')}`,
          check: (got) =>
            fits(got, expected, exact.kind === 'IN_PROGRESS' ? { retryAfterMs: within?.retryAfterMs as Interval } : {}),
          // A replay does not show the replay window's end: keep the interval as it was.
          next: exact.kind === 'COMPLETED_REPLAY' ? keep(record) : (after ?? keep(record)),
        }
      },
    )
    const reasons: string[] = []
    for (const branch of branches) {
      const reason = branch.check(actual)
      if (reason === undefined) {
        model.records[this.k] = branch.next(actual)
        model.stats[branch.label] = (model.stats[branch.label] ?? 0) + 1
        return
      }
      reasons.push(`${branch.label}: ${reason}`)
    }
    throw new Error(
      `${this.toString()} on key ${this.k}: the outcome ${JSON.stringify(actual)} fits no branch of the model ` +
        `(record ${JSON.stringify(record)}, server time ${n0}..${n1}): ${reasons.join('; ')}`,
    )
  }
  toString = () =>
    `execute(k${this.k}, ${FINGERPRINTS[this.fp]}, ${this.result}, takeover=${this.takeover}, startSeparately=${this.startSeparately})`
}

/** What `execute()` answers when the claim decides without running the action. */
function expectedWithoutRun(claim: Record<string, unknown>): Record<string, unknown> {
  switch (claim.kind) {
    case 'FINGERPRINT_MISMATCH':
      return { kind: 'FINGERPRINT_MISMATCH', runs: 0 }
    case 'RECOVERY_REQUIRED':
      return { kind: 'RECOVERY_REQUIRED', reason: claim.reason, runs: 0 }
    case 'IN_PROGRESS':
      return { kind: 'IN_PROGRESS', runs: 0 }
    case 'COMPLETED_REPLAY': {
      // The executor decodes the stored response; one its codec cannot read is recovery-required.
      try {
        return { kind: 'REPLAYED', value: CODEC.encodeText(CODEC.decodeText(claim.response as string)), runs: 0 }
      } catch {
        return { kind: 'RECOVERY_REQUIRED', reason: 'CODEC_MISMATCH', runs: 0 }
      }
    }
    default:
      throw new Error(`unexpected claim answer ${String(claim.kind)}`)
  }
}

function summariseOutcome(outcome: ExecuteOutcome<{ v: string | number }>): Record<string, unknown> {
  switch (outcome.kind) {
    case 'EXECUTED':
      return { kind: outcome.kind, value: CODEC.encodeText(outcome.value), attempt: outcome.attempt }
    case 'REPLAYED':
      return { kind: outcome.kind, value: CODEC.encodeText(outcome.value) }
    case 'IN_PROGRESS':
      return { kind: outcome.kind, retryAfterMs: outcome.retryAfterMs }
    case 'FINGERPRINT_MISMATCH':
      return { kind: outcome.kind }
    case 'RECOVERY_REQUIRED':
      return { kind: outcome.kind, reason: outcome.reason }
    case 'FAILED':
      return {
        kind: outcome.kind,
        classification: outcome.classification,
        recorded: outcome.recorded,
        attempt: outcome.attempt,
      }
    default:
      return { kind: outcome.kind, detail: String((outcome as { cause?: unknown }).cause ?? '') }
  }
}

function who(owner: number): string {
  return owner === HOLDER ? 'holder' : `o${owner}`
}

function signed(n: number): string {
  return n === 0 ? '' : n > 0 ? `+${n}` : String(n)
}

const key = fc.nat({ max: KEYS_PER_RUN - 1 })
const owner = fc.nat({ max: OWNERS.length - 1 })
/** Transitions mostly come from the record's holder, with the right attempt and rev. */
const sender = fc.constantFrom(HOLDER, HOLDER, HOLDER, 0, 1, 2)
const delta = fc.constantFrom(0, 0, 0, 0, -1, 1, -2)

/** The command arbitraries: raw store calls, executions and waits. */
export function modelCommands(maxCommands: number) {
  const claim = fc
    .tuple(key, owner, fc.constantFrom(0, 0, 0, 1), fc.boolean(), fc.boolean(), fc.boolean())
    .map(([k, o, fp, start, takeover, wait]) => new ClaimCommand(k, o, fp, start, takeover, wait))
  return fc.commands<Model, Real, false>(
    [
      claim,
      claim,
      fc.tuple(key, sender, delta, delta).map(([k, o, a, r]) => new StartCommand(k, o, a, r)),
      fc
        .tuple(key, sender, delta, delta, fc.nat({ max: RESPONSES.length - 1 }))
        .map(([k, o, a, r, resp]) => new CompleteCommand(k, o, a, r, resp)),
      fc
        .tuple(key, sender, delta, delta, fc.boolean())
        .map(([k, o, a, r, retryable]) => new MarkFailedCommand(k, o, a, r, retryable)),
      fc.tuple(key, sender, delta, delta).map(([k, o, a, r]) => new ReleaseCommand(k, o, a, r)),
      fc.tuple(key, sender, delta).map(([k, o, a]) => new RenewCommand(k, o, a)),
      fc.tuple(key, owner).map(([k, o]) => new InspectCommand(k, o)),
      fc
        .tuple(key, fc.nat({ max: 1 }), fc.constantFrom('complete', 'retryable', 'unknown'), fc.boolean(), fc.boolean())
        .map(
          ([k, fp, result, takeover, separately]) =>
            new ExecuteCommand(k, fp, result as 'complete' | 'retryable' | 'unknown', takeover, separately),
        ),
      fc.constantFrom(5, 10, 20, LEASE_MS + 5, RETENTION_MS + 10, REPLAY_MS + 10).map((ms) => new WaitCommand(ms)),
    ],
    { maxCommands, size: 'max' },
  )
}
