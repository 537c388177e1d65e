/**
 * What a failed record keeps of its cause (src/core/failure-cause.ts): the class always, a
 * message only in idemkit's own words, one bounded line; and how the stores' bytes carry it.
 */
import { describe, expect, it } from 'vitest'
import { StoreUnavailableError } from '../../src/core/errors.js'
import {
  boundCause,
  causeBytes,
  causeOfError,
  causeOfSettled,
  decodeCause,
  encodeCause,
  storedCause,
} from '../../src/core/failure-cause.js'

class PaymentDeclined extends Error {}

describe('the cause of a failure', () => {
  it("keeps a handler's error's class, never its message", () => {
    expect(causeOfError(new PaymentDeclined('card 4242 declined for alice@example.com'))).toEqual({
      class: 'PaymentDeclined',
    })
    expect(causeOfError(new TypeError('x is undefined'))).toEqual({ class: 'TypeError' })
    expect(causeOfError(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }))).toEqual({
      class: 'Error [ECONNRESET]',
    })
    // A code that is not a plain constant (it could be anything the handler put there) is left out.
    expect(causeOfError(Object.assign(new Error('x'), { code: 'order 42 for bob' }))).toEqual({ class: 'Error' })
    expect(causeOfError('a string')).toEqual({ class: 'thrown string' })
    expect(causeOfError(null)).toEqual({ class: 'null' })
  })

  it("keeps idemkit's own errors with their code and message", () => {
    const error = new StoreUnavailableError('The Redis store is not connected; nothing was sent.')
    expect(causeOfError(error)).toEqual({
      class: 'ERR_IDEM_STORE_UNAVAILABLE',
      message: 'The Redis store is not connected; nothing was sent.',
    })
  })

  it('names an HTTP answer the classifier called a failure by its status, and the error behind it', () => {
    expect(causeOfSettled({ ok: true, value: { status: 503, body: 'secret' } })).toEqual({ class: 'HTTP 503' })
    expect(causeOfSettled({ ok: true, value: { status: 500, error: new PaymentDeclined('for bob') } })).toEqual({
      class: 'PaymentDeclined, HTTP 500',
    })
    expect(causeOfSettled({ ok: true, value: 'a value' })).toEqual({ class: 'result' })
    expect(causeOfSettled({ ok: false, error: new RangeError('n') })).toEqual({ class: 'RangeError' })
  })

  it('bounds class and message to one line of 100 and 200 characters', () => {
    const bounded = boundCause({ class: `A\r\n${'b'.repeat(200)}`, message: `one\ttwo\u2028${'m'.repeat(300)}` })
    expect(bounded?.class).toHaveLength(100)
    expect(bounded?.class.startsWith('A b')).toBe(true)
    expect(bounded?.class.endsWith('…')).toBe(true)
    expect(bounded?.message).toHaveLength(200)
    expect(bounded?.message?.startsWith('one two m')).toBe(true)
    expect(boundCause({ class: ' \n ' })).toBeUndefined()
    expect(boundCause({ class: 'X', message: '\n' })).toEqual({ class: 'X' })
  })

  it('round-trips through the bytes a failed record keeps, and reads nothing else as a cause', () => {
    const cause = { class: 'ERR_IDEM_X', message: 'é ✓' }
    expect(decodeCause(encodeCause(cause))).toEqual(cause)
    expect(decodeCause(encodeCause({ class: 'T' }))).toEqual({ class: 'T' })
    expect(decodeCause(Buffer.alloc(0))).toBeUndefined()
    expect(decodeCause(Buffer.from('{not json'))).toBeUndefined()
    expect(decodeCause(Buffer.from('{"m":"no class"}'))).toBeUndefined()
    expect(storedCause('ABANDONED', encodeCause(cause))).toEqual(cause)
    expect(storedCause('COMPLETED', encodeCause(cause))).toBeUndefined()
    expect(causeBytes({ state: 'FAILED_RETRYABLE', cause })).toEqual(encodeCause(cause))
    expect(causeBytes({ state: 'EXECUTING', cause })).toBeUndefined()
  })
})
