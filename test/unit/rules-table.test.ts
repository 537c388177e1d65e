/**
 * src/core/rules.ts as tables: every rule row × every input it reads → the verdict
 * docs/design.md §3 gives, written out cell by cell. The same cells are what the Lua copies
 * (lib/live.lua, claim.lua, lib/transition.lua) and the PL/pgSQL copies (`<table>_claim_v4`,
 * `<table>_check_v2` in src/stores/postgres/sql/) decide; the contract tests run the stores themselves. The Redis claim without a script
 * (`foundAnswer`, `runningAnswer`) runs on the same records, read from their bytes as the
 * Redis store reads them, beside `claimStep`'s answers.
 */
import { describe, expect, it } from 'vitest'
import { ExpiredExecution, RecordState, TransitionReply } from '../../src/core/record.js'
import {
  ClaimStep,
  claimAnswer,
  claimStep,
  foundAnswer,
  leaseLeftMs,
  liveRecord,
  ownerCheck,
  RUNNING,
  type RuleRecord,
  runningAnswer,
  transitionCheck,
} from '../../src/core/rules.js'
import { decodeRecord, encodeRecord, FRESH_LAYOUT, type StoredRecord } from '../../src/stores/record-layout.js'
import { foundRecord } from '../../src/stores/redis/fast-claim.js'

const NOW = 1_700_000_000_000
const OWNER = 'a'.repeat(64)
const OTHER = 'b'.repeat(64)
const FP = 'fp-1'
const LEGACY_FP = 'fp-0'
const STATES = Object.values(RecordState)

function record(fields: Partial<RuleRecord> = {}): RuleRecord {
  return {
    state: RecordState.EXECUTING,
    owner: OWNER,
    attempt: 3,
    rev: 7,
    fp: FP,
    leaseUntil: NOW + 1_000,
    replayUntil: 0,
    expiresAt: NOW + 10_000,
    ...fields,
  }
}

describe('liveRecord: absent once expiresAt <= now, a COMPLETED record once replayUntil <= now', () => {
  it('reads no record as absent', () => {
    expect(liveRecord(undefined, NOW)).toBeUndefined()
  })

  /** A time against now, for the test's name. */
  const at = (offset: number) => (offset === 0 ? 'now' : `now${offset > 0 ? '+' : ''}${offset}`)
  // [state, expiresAt - now, replayUntil - now (COMPLETED only), live]
  const rows: [RecordState, number, number | undefined, boolean][] = [
    ...STATES.flatMap((state): [RecordState, number, number | undefined, boolean][] => {
      const replayIn = state === RecordState.COMPLETED ? 1 : undefined
      return [
        [state, 1, replayIn, true],
        [state, 0, replayIn, false],
        [state, -1, replayIn, false],
      ]
    }),
    [RecordState.COMPLETED, 5_000, 1, true],
    [RecordState.COMPLETED, 5_000, 0, false],
    [RecordState.COMPLETED, 5_000, -1, false],
  ]

  it.each(
    rows.map(
      ([state, expiresIn, replayIn, live]) =>
        [state, at(expiresIn), replayIn === undefined ? 'unset' : at(replayIn), live, expiresIn, replayIn] as const,
    ),
  )('%s with expiresAt %s and replayUntil %s: live %s', (state, _expires, _replay, live, expiresIn, replayIn) => {
    const stored = record({
      state,
      expiresAt: NOW + expiresIn,
      replayUntil: replayIn === undefined ? 0 : NOW + replayIn,
    })
    expect(liveRecord(stored, NOW)).toBe(live ? stored : undefined)
  })

  it('ignores replayUntil in every state but COMPLETED', () => {
    for (const state of STATES.filter((one) => one !== RecordState.COMPLETED)) {
      const stored = record({ state, replayUntil: NOW - 1 })
      expect(liveRecord(stored, NOW)).toBe(stored)
    }
  })
})

describe('leaseLeftMs: the ms left on the lease, 0 once leaseUntil <= now', () => {
  it.each([
    ['now+1000', 1_000, 1_000],
    ['now+1', 1, 1],
    ['now', 0, 0],
    ['now-1', 0, -1],
    ['now-60000', 0, -60_000],
  ])('leaseUntil %s: %d ms left', (_case, left, leaseIn) => {
    expect(leaseLeftMs(record({ leaseUntil: NOW + leaseIn }), NOW)).toBe(left)
  })
})

describe('claimStep: claim steps 1-8 (claim.lua, _claim_v4)', () => {
  const { ACQUIRE, FINGERPRINT_MISMATCH, COMPLETED_REPLAY, ABANDONED, REPLAYED_ACQUIRE, TAKE_OVER } = ClaimStep
  const { EXPIRED_EXECUTION, IN_PROGRESS } = ClaimStep
  const { RECOVER, TAKEOVER, RESUME } = ExpiredExecution

  /** The inputs besides state and fingerprint, in the order of the columns below. */
  const COLUMNS: readonly [mine: boolean, leaseLive: boolean, expiredExecution: ExpiredExecution][] = [
    [true, true, RECOVER],
    [true, true, TAKEOVER],
    [true, true, RESUME],
    [true, false, RECOVER],
    [true, false, TAKEOVER],
    [true, false, RESUME],
    [false, true, RECOVER],
    [false, true, TAKEOVER],
    [false, true, RESUME],
    [false, false, RECOVER],
    [false, false, TAKEOVER],
    [false, false, RESUME],
  ]

  /**
   * A record whose fingerprint matches, by state: one verdict per column (mine/lease live, then
   * mine/run out, then another owner's live and run out; each recover, takeover, resume).
   */
  const MATCHING: Record<RecordState, readonly ClaimStep[]> = {
    // Step 5 for its own owner, whatever the lease; step 8 while another's lease is live; step 6 once it ran out.
    CLAIMED: [...Array(6).fill(REPLAYED_ACQUIRE), ...Array(3).fill(IN_PROGRESS), ...Array(3).fill(TAKE_OVER)],
    // Step 5; step 8; step 7: recover answers EXPIRED_EXECUTION, takeover and resume take it over.
    EXECUTING: [
      ...Array(6).fill(REPLAYED_ACQUIRE),
      ...Array(3).fill(IN_PROGRESS),
      EXPIRED_EXECUTION,
      TAKE_OVER,
      TAKE_OVER,
    ],
    // Step 3, even for the owner.
    COMPLETED: Array(12).fill(COMPLETED_REPLAY),
    // Step 4, even for the owner; resume takes it over (the run ended), whatever the lease.
    ABANDONED: Array.from({ length: 12 }, (_, column) => (column % 3 === 2 ? TAKE_OVER : ABANDONED)),
    // Step 6 for everyone, its own owner too (step 5 is only for a record it can still hold).
    FAILED_RETRYABLE: Array(12).fill(TAKE_OVER),
  }

  const rows = STATES.flatMap((state) =>
    COLUMNS.flatMap(([mine, leaseLive, expiredExecution], column) => [
      [state, 'the same', mine, leaseLive, expiredExecution, MATCHING[state][column]] as const,
      [state, 'a legacy', mine, leaseLive, expiredExecution, MATCHING[state][column]] as const,
      // Step 2 comes before every other step, in every state, for the owner too.
      [state, 'another', mine, leaseLive, expiredExecution, FINGERPRINT_MISMATCH] as const,
    ]),
  )

  it('covers every state and fingerprint with all twelve columns', () => {
    expect(rows).toHaveLength(STATES.length * 3 * COLUMNS.length)
  })

  it.each(rows)(
    '%s with %s fingerprint, mine %s, lease live %s, %s: %s',
    (state, fingerprint, mine, leaseLive, expiredExecution, verdict) => {
      const fp = fingerprint === 'the same' ? FP : fingerprint === 'a legacy' ? LEGACY_FP : 'fp-other'
      const claim = { fingerprint: FP, legacyFingerprints: [LEGACY_FP], expiredExecution }
      expect(claimStep({ state, fp }, leaseLive, mine, claim)).toBe(verdict)
    },
  )

  it.each(COLUMNS)('step 1: an absent record is acquired (mine %s, lease live %s, %s)', (mine, leaseLive, expired) => {
    expect(claimStep(undefined, leaseLive, mine, { fingerprint: FP, expiredExecution: expired })).toBe(ACQUIRE)
  })

  it('matches a legacy fingerprint only when the claim brings it', () => {
    const claim = { fingerprint: FP, expiredExecution: RECOVER }
    expect(claimStep({ state: RecordState.COMPLETED, fp: LEGACY_FP }, true, false, claim)).toBe(FINGERPRINT_MISMATCH)
  })
})

describe("the claim without a script (foundAnswer, runningAnswer): claimStep's answer wherever it answers", () => {
  const { RECOVER, TAKEOVER, RESUME } = ExpiredExecution
  const LEASE_MS = 1_000
  const EXPIRES_IN = 5_000
  /** How the record was written: layout 2 (times in it), or layout 3 (times from the key's expiry). */
  const LAYOUTS = ['layout 2', 'layout 3'] as const
  /** A COMPLETED record's replay window against its key's expiry (others have none). */
  const WINDOWS = ['ends with the key', 'ends before the key, open', 'ends before the key, closed'] as const
  type Window = (typeof WINDOWS)[number] | 'none'

  interface Row {
    readonly state: RecordState
    readonly fingerprint: 'the same' | 'a legacy' | 'another'
    readonly mine: boolean
    readonly leaseLive: boolean
    readonly expiredExecution: ExpiredExecution
    readonly wait: boolean
    readonly layout: (typeof LAYOUTS)[number]
    readonly window: Window
    /** Whether the upper bound of the store's clock shows the lease live (never a lease that ran out). */
    readonly bounded: boolean
  }

  const rows: Row[] = STATES.flatMap((state) =>
    (['the same', 'a legacy', 'another'] as const).flatMap((fingerprint) =>
      [true, false].flatMap((mine) =>
        [true, false].flatMap((leaseLive) =>
          [RECOVER, TAKEOVER, RESUME].flatMap((expiredExecution) =>
            [false, true].flatMap((wait) =>
              LAYOUTS.flatMap((layout) =>
                (state === RecordState.COMPLETED && layout === 'layout 2' ? WINDOWS : (['none'] as const)).flatMap(
                  (window: Window) =>
                    (leaseLive ? [true, false] : [false]).map((bounded) => ({
                      state,
                      fingerprint,
                      mine,
                      leaseLive,
                      expiredExecution,
                      wait,
                      layout,
                      window,
                      bounded,
                    })),
                ),
              ),
            ),
          ),
        ),
      ),
    ),
  )

  /**
   * The cells the claim without a script answers (docs/design.md §6, "A claim without a
   * script"); every other goes to claim.lua.
   */
  function answersWithoutScript(row: Row): boolean {
    if (row.state === RecordState.COMPLETED) return row.layout === 'layout 2' && row.window === 'ends with the key'
    if (row.fingerprint === 'another') return true
    const running = row.state === RecordState.CLAIMED || row.state === RecordState.EXECUTING
    return running && !row.wait && !row.mine && row.bounded
  }

  /** The record as a store holds it; its key exists, so it was written to live past now. */
  function stored(row: Row): StoredRecord {
    const expiresAt = NOW + EXPIRES_IN
    const replayUntil =
      row.window === 'ends with the key'
        ? expiresAt
        : row.window === 'ends before the key, open'
          ? NOW + 1_000
          : row.window === 'ends before the key, closed'
            ? NOW - 1
            : 0
    const completed = row.state === RecordState.COMPLETED
    return {
      ...record({ state: row.state, owner: row.mine ? OWNER : OTHER, expiresAt }),
      leaseUntil: row.leaseLive ? NOW + LEASE_MS : NOW - 1,
      replayUntil,
      fp: row.fingerprint === 'the same' ? FP : row.fingerprint === 'a legacy' ? LEGACY_FP : 'fp-other',
      codec: 'c1',
      policy: 'p1',
      op: 'op',
      createdAt: NOW - 10_000,
      updatedAt: NOW - 5_000,
      response: completed ? Buffer.from('the stored answer') : Buffer.alloc(0),
    }
  }

  /** What the Redis claim without a script answers from the record's bytes (`undefined`: the script decides). */
  function withoutScript(row: Row, held: StoredRecord) {
    const bytes = encodeRecord(held)
    // Layout 3 holds the same bytes with times counted from the key's expiry, 1 ms before expiresAt.
    if (row.layout === 'layout 3') bytes[0] = FRESH_LAYOUT
    const claim = {
      fingerprint: FP,
      legacyFingerprints: [LEGACY_FP],
      expiredExecution: row.expiredExecution,
      wait: row.wait,
    }
    const view = foundRecord(bytes)
    if (view === undefined) throw new Error('the bytes of a record read as no record')
    const first = foundAnswer(view, claim)
    if (first !== RUNNING) return first
    const whole = view.record ?? decodeRecord(bytes, held.expiresAt - 1)
    // The upper bound of Redis's clock at the SET: now, here, so the lease left is exact.
    const bound = row.bounded ? whole.leaseUntil - NOW : undefined
    return runningAnswer(whole, bound, whole.owner === OWNER, claim)
  }

  it('covers every state, fingerprint, column, wait, layout, window and bound', () => {
    // Non-COMPLETED: 3 fingerprints × 18 (owner, lease with or without bound, expiredExecution) × 2 waits × 2 layouts.
    expect(rows).toHaveLength(4 * 3 * 18 * 2 * 2 + 3 * 18 * 2 * (WINDOWS.length + 1))
    expect(rows.filter(answersWithoutScript).length).toBeGreaterThan(rows.length / 4)
  })

  it.each(
    rows.map((row) => [
      row.state,
      row.fingerprint,
      row.mine ? 'mine' : "another's",
      row.leaseLive ? (row.bounded ? 'live, bounded' : 'live, unbounded') : 'run out',
      row.expiredExecution,
      row.wait ? 'waits' : 'does not wait',
      row.layout,
      row.window,
      answersWithoutScript(row) ? 'answers' : 'leaves it to the script',
      row,
    ]),
  )(
    '%s with %s fingerprint, %s, lease %s, %s, claim %s, %s, replay window %s: %s',
    (_state, _fp, _mine, _lease, _expired, _wait, _layout, _window, _verdict, row) => {
      const held = stored(row)
      const claim = { fingerprint: FP, legacyFingerprints: [LEGACY_FP], expiredExecution: row.expiredExecution }
      const live = liveRecord(held, NOW)
      const reference = claimAnswer(
        claimStep(live, leaseLeftMs(held, NOW) > 0, row.mine, claim),
        live,
        leaseLeftMs(held, NOW),
      )

      const answer = withoutScript(row, held)

      if (answersWithoutScript(row)) {
        expect(answer).toBeDefined()
        expect(answer).toEqual(reference)
      } else {
        expect(answer).toBeUndefined()
      }
    },
  )
})

describe('ownerCheck: the holder check of every transition and renew (lib/transition.lua, _check_v2)', () => {
  const rows: [string, TransitionReply | 'held', RuleRecord | undefined][] = [
    ['no live record', TransitionReply.NOT_FOUND, undefined],
    ...STATES.flatMap((state): [string, TransitionReply | 'held', RuleRecord | undefined][] => [
      [`${state}, same owner and attempt`, 'held', record({ state })],
      [`${state}, another owner`, TransitionReply.NOT_OWNER, record({ state, owner: OTHER })],
      [`${state}, another attempt (taken over)`, TransitionReply.NOT_OWNER, record({ state, attempt: 4 })],
      [`${state}, an earlier attempt`, TransitionReply.NOT_OWNER, record({ state, attempt: 2 })],
      [`${state}, another owner and attempt`, TransitionReply.NOT_OWNER, record({ state, owner: OTHER, attempt: 4 })],
    ]),
  ]

  it.each(rows)('%s: %s', (_case, verdict, stored) => {
    const refused = ownerCheck(stored, { owner: OWNER, attempt: 3 })
    expect(refused === undefined ? 'held' : refused.kind).toBe(verdict)
  })

  it('answers NOT_FOUND for a stored record that is no longer live (liveRecord first)', () => {
    const expired = record({ expiresAt: NOW })
    expect(ownerCheck(liveRecord(expired, NOW), { owner: OWNER, attempt: 3 })).toEqual({
      kind: TransitionReply.NOT_FOUND,
    })
  })
})

describe('transitionCheck: compare-and-set with the ALREADY rule (lib/transition.lua, _check_v2)', () => {
  const REV = 7
  /** Revisions the record may be at, against the sender's `REV`. */
  const REVS = [REV - 1, REV, REV + 1, REV + 2]

  interface Transition {
    readonly from: RecordState
    readonly to: RecordState | undefined
    /** The one (state, rev) that applies. */
    readonly applies: readonly [RecordState, number]
    /** The one (state, rev) that answers ALREADY, none for release. */
    readonly already: readonly [RecordState, number] | undefined
  }
  const TRANSITIONS: Record<string, Transition> = {
    start: {
      from: RecordState.CLAIMED,
      to: RecordState.EXECUTING,
      applies: [RecordState.CLAIMED, REV],
      already: [RecordState.EXECUTING, REV + 1],
    },
    complete: {
      from: RecordState.EXECUTING,
      to: RecordState.COMPLETED,
      applies: [RecordState.EXECUTING, REV],
      already: [RecordState.COMPLETED, REV + 1],
    },
    'markFailed (retryable)': {
      from: RecordState.EXECUTING,
      to: RecordState.FAILED_RETRYABLE,
      applies: [RecordState.EXECUTING, REV],
      already: [RecordState.FAILED_RETRYABLE, REV + 1],
    },
    'markFailed (unknown)': {
      from: RecordState.EXECUTING,
      to: RecordState.ABANDONED,
      applies: [RecordState.EXECUTING, REV],
      already: [RecordState.ABANDONED, REV + 1],
    },
    release: { from: RecordState.CLAIMED, to: undefined, applies: [RecordState.CLAIMED, REV], already: undefined },
  }

  const ref = { key: 'k', owner: OWNER, attempt: 3, rev: REV }
  const same = (a: readonly [RecordState, number] | undefined, state: RecordState, rev: number) =>
    a !== undefined && a[0] === state && a[1] === rev

  const rows = Object.entries(TRANSITIONS).flatMap(([name, transition]) =>
    STATES.flatMap((state) =>
      REVS.map((rev) => {
        const verdict = same(transition.applies, state, rev)
          ? undefined
          : same(transition.already, state, rev)
            ? { kind: TransitionReply.ALREADY, rev }
            : { kind: TransitionReply.WRONG_STATE, state }
        const revName =
          rev === REV ? "the sender's rev" : `the sender's rev ${rev > REV ? '+' : '-'} ${Math.abs(rev - REV)}`
        const answer = verdict === undefined ? 'applies' : verdict.kind
        return [name, state, revName, answer, rev, transition, verdict] as const
      }),
    ),
  )

  it('has exactly one applying and at most one ALREADY cell per transition', () => {
    for (const name of Object.keys(TRANSITIONS)) {
      const mine = rows.filter((row) => row[0] === name)
      expect(mine).toHaveLength(STATES.length * REVS.length)
      expect(mine.filter((row) => row[6] === undefined)).toHaveLength(1)
      expect(mine.filter((row) => row[6]?.kind === TransitionReply.ALREADY)).toHaveLength(name === 'release' ? 0 : 1)
    }
  })

  it.each(rows)('%s on a held %s record at %s: %s', (_name, state, _rev, _answer, rev, transition, verdict) => {
    const stored = record({ state, rev })
    expect(transitionCheck(stored, ref, transition.from, transition.to)).toEqual(verdict)
  })

  it.each(Object.entries(TRANSITIONS))('%s refuses before comparing: NOT_FOUND, then NOT_OWNER', (_name, t) => {
    const [state, rev] = t.applies
    expect(transitionCheck(undefined, ref, t.from, t.to)).toEqual({ kind: TransitionReply.NOT_FOUND })
    expect(transitionCheck(record({ state, rev, owner: OTHER }), ref, t.from, t.to)).toEqual({
      kind: TransitionReply.NOT_OWNER,
    })
    expect(transitionCheck(record({ state, rev, attempt: 4 }), ref, t.from, t.to)).toEqual({
      kind: TransitionReply.NOT_OWNER,
    })
    if (t.already !== undefined) {
      const [done, doneRev] = t.already
      expect(transitionCheck(record({ state: done, rev: doneRev, attempt: 4 }), ref, t.from, t.to)).toEqual({
        kind: TransitionReply.NOT_OWNER,
      })
    }
  })
})
