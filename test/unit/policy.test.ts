import { describe, expect, it } from 'vitest'
import { DEFAULT_POLICY, resolvePolicy } from '../../src/core/policy.js'

describe('resolvePolicy', () => {
  it('defaults to a 30 s lease and 24 h windows', () => {
    expect(resolvePolicy(undefined)).toEqual({
      revision: '1',
      leaseMs: 30_000,
      replayWindowMs: 86_400_000,
      failureRetentionMs: 86_400_000,
      expiredExecution: 'recover',
    })
  })

  it('treats undefined fields as defaults and freezes the result', () => {
    const policy = resolvePolicy({ leaseMs: undefined, replayWindowMs: 1_000 })

    expect(policy.leaseMs).toBe(DEFAULT_POLICY.leaseMs)
    expect(policy.replayWindowMs).toBe(1_000)
    expect(Object.isFrozen(policy)).toBe(true)
  })

  it.each([
    ['leaseMs', 0],
    ['leaseMs', 10.5],
    ['leaseMs', 2 ** 31],
    ['replayWindowMs', -1],
    ['failureRetentionMs', '1000'],
    ['revision', ''],
    ['expiredExecution', 'retry'],
  ])('rejects %s = %j with a coded error naming the option', (name, value) => {
    expect(() => resolvePolicy({ [name]: value })).toThrow(
      expect.objectContaining({ code: 'ERR_IDEM_INVALID_OPTION', message: expect.stringContaining(`"${name}"`) }),
    )
  })
})
