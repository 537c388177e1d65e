import { describe, expect, it } from 'vitest'
import { newOwnerToken } from '../../src/core/attempt.js'

describe('newOwnerToken', () => {
  it('gives 64 lowercase hex characters, never the same twice across batch refills', () => {
    const tokens = Array.from({ length: 1_000 }, newOwnerToken)

    expect(tokens.every((token) => /^[0-9a-f]{64}$/.test(token))).toBe(true)
    expect(new Set(tokens).size).toBe(tokens.length)
  })
})
