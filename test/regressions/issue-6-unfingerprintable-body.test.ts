/**
 * Issue 6, found by the fault suite's bad-input run (fault 10): a JSON body that parses but
 * cannot be canonicalised (RFC 8785 rejects a lone surrogate such as "\ud800") made the
 * fingerprint throw, and the request answered 500. It is the client's input that is bad: the
 * layer answers 400 IDEMPOTENCY_BODY_INVALID, holds no key and runs nothing.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { exampleApp, headers, type TestApp } from '../helpers/example-app.js'
import { createMemoryStore, type TestStore } from '../helpers/stores.js'

describe('issue 6: a JSON body that cannot be fingerprinted', () => {
  let backing: TestStore
  let test: TestApp

  beforeEach(async () => {
    backing = await createMemoryStore()
    test = await exampleApp(backing.store)
  })

  afterEach(async () => {
    await test.app.close()
    await backing.teardown()
  })

  it('answers 400 IDEMPOTENCY_BODY_INVALID and runs nothing when the body holds a lone surrogate', async () => {
    const payload = '{"item":"\\ud800","qty":1}'

    const first = await test.app.inject({ method: 'POST', url: '/orders', headers: headers('alice', 'k-1'), payload })
    const retry = await test.app.inject({ method: 'POST', url: '/orders', headers: headers('alice', 'k-1'), payload })
    const orders = await test.app.inject({ method: 'GET', url: '/orders', headers: headers('alice') })

    expect(first.statusCode).toBe(400)
    expect(first.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(first.json()).toMatchObject({ status: 400, code: 'IDEMPOTENCY_BODY_INVALID' })
    expect(retry.statusCode).toBe(400)
    expect(orders.json()).toEqual({ orders: [] })
  })

  it('still runs a body whose surrogates are paired', async () => {
    const payload = '{"item":"\\ud83d\\ude00","qty":1}'

    const response = await test.app.inject({
      method: 'POST',
      url: '/orders',
      headers: headers('alice', 'k-2'),
      payload,
    })

    expect(response.statusCode).toBe(201)
  })
})
