import { describe, expect, it } from 'vitest'
import {
  ProblemCode,
  problemResponse,
  problemRetryable,
  problemStatus,
  problemType,
  retryAfterSeconds,
} from '../../src/http/problem.js'

describe('problemResponse', () => {
  it.each([
    [ProblemCode.KEY_MISSING, 400],
    [ProblemCode.KEY_INVALID, 400],
    [ProblemCode.PRINCIPAL_REQUIRED, 401],
    [ProblemCode.IN_FLIGHT, 409],
    [ProblemCode.KEY_REUSED, 422],
    [ProblemCode.RECOVERY_REQUIRED, 503],
    [ProblemCode.STORE_UNAVAILABLE, 503],
    [ProblemCode.ROUTE_UNPROTECTED, 500],
    [ProblemCode.BODY_UNREAD, 415],
  ])('answers %s with status %i as RFC 9457 problem+json', (code, status) => {
    const response = problemResponse(code, 'detail')

    expect(response.status).toBe(status)
    expect(problemStatus(code)).toBe(status)
    expect(response.headers['content-type']).toBe('application/problem+json; charset=utf-8')
    expect(JSON.parse(response.body as string)).toEqual({
      type: problemType(code),
      title: expect.any(String),
      status,
      detail: 'detail',
      code,
      retryable: expect.any(Boolean),
    })
  })

  it.each([
    [ProblemCode.KEY_MISSING, false],
    [ProblemCode.KEY_INVALID, false],
    [ProblemCode.PRINCIPAL_REQUIRED, false],
    [ProblemCode.IN_FLIGHT, true],
    [ProblemCode.KEY_REUSED, false],
    [ProblemCode.RECOVERY_REQUIRED, false],
    [ProblemCode.STORE_UNAVAILABLE, true],
    [ProblemCode.ROUTE_UNPROTECTED, false],
    [ProblemCode.BODY_UNREAD, false],
    [ProblemCode.BODY_INVALID, false],
  ])('says whether a retry of %s can help: retryable %s, in the body and in x-should-retry', (code, retryable) => {
    const response = problemResponse(code, 'detail')

    expect(problemRetryable(code)).toBe(retryable)
    expect(JSON.parse(response.body as string).retryable).toBe(retryable)
    expect(response.headers['x-should-retry']).toBe(String(retryable))
    expect(response.headers['idempotency-status']).toBe(problemType(code).replace('urn:idemkit:problem:', ''))
  })

  it('gives every code its own stable type', () => {
    const types = Object.values(ProblemCode).map(problemType)

    expect(new Set(types).size).toBe(types.length)
    expect(problemType(ProblemCode.IN_FLIGHT)).toBe('urn:idemkit:problem:in-flight')
  })

  it('adds Retry-After in whole seconds, rounded up', () => {
    expect(problemResponse(ProblemCode.IN_FLIGHT, 'd', 1_200).headers['retry-after']).toBe('2')
    expect(retryAfterSeconds(1)).toBe(1)
    expect(retryAfterSeconds(30_000)).toBe(30)
    expect(problemResponse(ProblemCode.KEY_REUSED, 'd').headers['retry-after']).toBeUndefined()
  })
})
