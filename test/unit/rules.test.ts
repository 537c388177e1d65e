/**
 * The record rules of src/core/rules.ts as tables: claim steps 1-8 (`claimStep`) over every
 * state, fingerprint, lease and owner, and the answer of every step that writes nothing
 * (`claimAnswer`, which the memory store answers its claims with and the executor a record it
 * read without claiming).
 */
import { describe, expect, it } from 'vitest'
import { ClaimReply, ExpiredExecution, RecordState, RecoveryReason } from '../../src/core/record.js'
import { type AnsweredRecord, ClaimStep, claimAnswer, claimStep } from '../../src/core/rules.js'

const S = RecordState
const claim = { fingerprint: 'f1:aa', expiredExecution: ExpiredExecution.RECOVER }
const takeover = { fingerprint: 'f1:aa', expiredExecution: ExpiredExecution.TAKEOVER }

describe('claimStep: docs/design.md §3 claim steps 1-8, in order', () => {
  // state | fingerprint matches | lease live | mine | expiredExecution takeover | step
  const table: [RecordState | undefined, boolean, boolean, boolean, boolean, ClaimStep][] = [
    [undefined, true, false, false, false, ClaimStep.ACQUIRE],
    [S.COMPLETED, false, false, true, false, ClaimStep.FINGERPRINT_MISMATCH],
    [S.EXECUTING, false, true, true, false, ClaimStep.FINGERPRINT_MISMATCH],
    [S.COMPLETED, true, false, false, false, ClaimStep.COMPLETED_REPLAY],
    [S.ABANDONED, true, false, false, false, ClaimStep.ABANDONED],
    [S.CLAIMED, true, true, true, false, ClaimStep.REPLAYED_ACQUIRE],
    [S.EXECUTING, true, false, true, false, ClaimStep.REPLAYED_ACQUIRE],
    [S.FAILED_RETRYABLE, true, false, true, false, ClaimStep.TAKE_OVER],
    [S.FAILED_RETRYABLE, true, false, false, false, ClaimStep.TAKE_OVER],
    [S.CLAIMED, true, false, false, false, ClaimStep.TAKE_OVER],
    [S.EXECUTING, true, false, false, true, ClaimStep.TAKE_OVER],
    [S.EXECUTING, true, false, false, false, ClaimStep.EXPIRED_EXECUTION],
    [S.EXECUTING, true, true, false, false, ClaimStep.IN_PROGRESS],
    [S.CLAIMED, true, true, false, false, ClaimStep.IN_PROGRESS],
  ]

  it.each(table)(
    '%s, fingerprint matches %s, lease live %s, mine %s, takeover %s → %s',
    (state, fp, live, mine, over, step) => {
      const record = state === undefined ? undefined : { state, fp: fp ? 'f1:aa' : 'f1:bb' }
      expect(claimStep(record, live, mine, over ? takeover : claim)).toBe(step)
    },
  )

  it('matches a legacy fingerprint as the current one', () => {
    const record = { state: S.COMPLETED, fp: 'f0:old' }
    expect(claimStep(record, false, false, { ...claim, legacyFingerprints: ['f0:old'] })).toBe(
      ClaimStep.COMPLETED_REPLAY,
    )
  })
})

describe('claimAnswer: the answer of every step that writes nothing', () => {
  const response = Buffer.from('{"ok":true}')
  const record: AnsweredRecord = {
    state: S.EXECUTING,
    attempt: 3,
    rev: 7,
    leaseUntil: 1_000,
    response,
    codec: 'json',
    policy: '1',
    replayUntil: 2_000,
  }
  const table: [ClaimStep, AnsweredRecord | undefined, unknown][] = [
    [ClaimStep.ACQUIRE, undefined, undefined],
    [ClaimStep.TAKE_OVER, record, undefined],
    [ClaimStep.FINGERPRINT_MISMATCH, record, { kind: ClaimReply.FINGERPRINT_MISMATCH }],
    [
      ClaimStep.COMPLETED_REPLAY,
      { ...record, state: S.COMPLETED },
      { kind: ClaimReply.COMPLETED_REPLAY, response, codec: 'json', policy: '1', replayUntil: 2_000 },
    ],
    [ClaimStep.ABANDONED, record, { kind: ClaimReply.RECOVERY_REQUIRED, reason: RecoveryReason.ABANDONED }],
    [
      ClaimStep.REPLAYED_ACQUIRE,
      record,
      { kind: ClaimReply.REPLAYED_ACQUIRE, state: S.EXECUTING, attempt: 3, rev: 7, leaseUntil: 1_000 },
    ],
    [
      ClaimStep.EXPIRED_EXECUTION,
      record,
      { kind: ClaimReply.RECOVERY_REQUIRED, reason: RecoveryReason.EXPIRED_EXECUTION },
    ],
    [ClaimStep.IN_PROGRESS, record, { kind: ClaimReply.IN_PROGRESS, retryAfterMs: 250 }],
  ]

  it.each(table)('%s → %j', (step, found, answer) => {
    expect(claimAnswer(step, found, 250)).toEqual(answer)
  })

  it('answers a copy of the stored response, never the record bytes', () => {
    const answer = claimAnswer(ClaimStep.COMPLETED_REPLAY, { ...record, state: S.COMPLETED }, 0)
    if (answer?.kind !== ClaimReply.COMPLETED_REPLAY) throw new Error('expected a replay')
    answer.response[0] = 0
    expect(response.toString()).toBe('{"ok":true}')
  })
})
