/**
 * Issue 46, item 3: a message delivered, then delivered again after a second secret version was
 * added, ran twice through `execute()`: only the HTTP adapters looked the scope up under the
 * older secrets. An invocation that names its scope now has the executor compute its keys under
 * every version and look up the older ones first. Each store; the deliveries are counted.
 */
import { randomUUID } from 'node:crypto'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { jsonCodec } from '../../src/core/codec.js'
import { ErrorCode } from '../../src/core/errors.js'
import { type ExecuteRequest, Executor, execute } from '../../src/core/executor.js'
import { resolvePolicy } from '../../src/core/policy.js'
import { parseSecrets, type SecretsInput } from '../../src/core/scope.js'
import { gate } from '../helpers/executor-harness.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const OLD = 'o'.repeat(32)
const NEW = 'n'.repeat(32)
const BEFORE: SecretsInput = { current: 1, keys: { 1: OLD } }
const DURING: SecretsInput = { current: 2, keys: { 1: OLD, 2: NEW } }
const AFTER: SecretsInput = { current: 2, keys: { 2: NEW } }

describe.each(STORES)('a secret rotation between two deliveries, on the %s store', (_name, create) => {
  let backing: TestStore
  let executions: number
  let messageId: string

  beforeEach(async () => {
    backing = await create()
    executions = 0
    messageId = randomUUID()
  })

  afterEach(async () => {
    await backing.teardown()
  })

  function deliver(secrets: SecretsInput, overrides: Partial<ExecuteRequest<{ charged: number }>> = {}) {
    return execute<{ charged: number }>({
      store: backing.store,
      secrets,
      scope: { principal: 'billing', key: messageId },
      operation: 'charge',
      fingerprint: 'f1:charge-100',
      codec: jsonCodec(),
      policy: resolvePolicy({ leaseMs: 10_000 }),
      action: async () => ({ charged: ++executions }),
      ...overrides,
    } as ExecuteRequest<{ charged: number }>)
  }

  it('replays the first delivery to a redelivery after the new version became current', async () => {
    const first = await deliver(BEFORE)

    const again = await deliver(DURING)

    expect(first).toMatchObject({ kind: 'EXECUTED', value: { charged: 1 } })
    expect(again).toEqual({ kind: 'REPLAYED', value: { charged: 1 } })
    expect(executions).toBe(1)
  })

  it('answers IN_PROGRESS to a redelivery while the first delivery still runs under the old secret', async () => {
    const hold = gate()
    let started = false
    const first = deliver(BEFORE, {
      action: async () => {
        started = true
        await hold.promise
        return { charged: ++executions }
      },
    })
    await expect.poll(() => started, { timeout: 10_000 }).toBe(true)

    const again = await deliver(DURING)
    hold.open()

    expect(again.kind).toBe('IN_PROGRESS')
    expect(await first).toMatchObject({ kind: 'EXECUTED', value: { charged: 1 } })
    expect(executions).toBe(1)
  })

  it('finds the record through the two phases of an Executor given parsed secrets', async () => {
    await deliver(BEFORE)
    const executor = new Executor<{ charged: number }>({
      store: backing.store,
      secrets: parseSecrets(DURING),
      operation: 'charge',
      codec: jsonCodec(),
      policy: resolvePolicy({ leaseMs: 10_000 }),
    })

    const begun = await executor.begin(
      { scope: { principal: 'billing', key: messageId }, fingerprint: 'f1:charge-100' },
      undefined,
    )

    expect(begun).toEqual({ kind: 'REPLAYED', value: { charged: 1 } })
    expect(executions).toBe(1)
  })

  it('runs a message again once the older version is removed (the documented end of a rotation)', async () => {
    await deliver(BEFORE)

    const after = await deliver(AFTER)

    expect(after).toMatchObject({ kind: 'EXECUTED', value: { charged: 2 } })
    expect(executions).toBe(2)
  })

  it('refuses a scope without secrets, naming the option', async () => {
    const outcome = deliver(BEFORE, { secrets: undefined })

    await expect(outcome).rejects.toMatchObject({ code: ErrorCode.INVALID_OPTION, message: /"secrets"/ })
    expect(executions).toBe(0)
  })
})
