import { createHash, createHmac, randomBytes } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { HMAC_HEADROOM, HmacSha256, sha256Hex } from '../../src/core/digest.js'

/** A message placed after the headroom macWithHeadroom expects. */
function withHeadroom(message: Buffer): Buffer {
  const buffer = Buffer.alloc(HMAC_HEADROOM + message.byteLength, 0xee)
  message.copy(buffer, HMAC_HEADROOM)
  return buffer
}

describe('HmacSha256', () => {
  // Keys shorter than, equal to and longer than SHA-256's 64-byte block (hashed first).
  const keyLengths = [32, 63, 64, 65, 100, 200]
  const messageLengths = [0, 1, 55, 56, 64, 119, 500]

  for (const oneShot of ['crypto.hash', 'fallback'] as const) {
    it(`equals createHmac('sha256') for every key and message length (${oneShot})`, () => {
      for (const keyLength of keyLengths) {
        const secret = randomBytes(keyLength)
        const key = oneShot === 'fallback' ? new HmacSha256(secret, null) : new HmacSha256(secret)
        for (const messageLength of messageLengths) {
          const message = randomBytes(messageLength)
          expect(key.macWithHeadroom(withHeadroom(message)), `key ${keyLength} B, message ${messageLength} B`).toBe(
            createHmac('sha256', secret).update(message).digest('hex'),
          )
        }
      }
    })
  }

  it('gives the same MAC when the same buffer is used twice (the pad is rewritten each time)', () => {
    const secret = randomBytes(32)
    const key = new HmacSha256(secret)
    const buffer = withHeadroom(Buffer.from('message'))
    const first = key.macWithHeadroom(buffer)

    expect(key.macWithHeadroom(buffer)).toBe(first)
    expect(first).toBe(createHmac('sha256', secret).update('message').digest('hex'))
  })
})

describe('sha256Hex', () => {
  it('equals createHash(sha256), with and without crypto.hash', () => {
    for (const length of [0, 3, 64, 1000]) {
      const data = randomBytes(length)
      const expected = createHash('sha256').update(data).digest('hex')

      expect(sha256Hex(data)).toBe(expected)
      expect(sha256Hex(data, null)).toBe(expected)
    }
  })
})
