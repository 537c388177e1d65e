/**
 * `context.keyFor(name)` of the executor on every store: the same keys on a takeover's re-run as
 * on the first execution, the keys of the secret version the held record lives under, and a
 * clear error where the executor was given no secrets.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { jsonCodec } from '../../src/core/codec.js'
import { derivedKey } from '../../src/core/derived-key.js'
import { type ActionContext, execute } from '../../src/core/executor.js'
import { resolvePolicy } from '../../src/core/policy.js'
import { parseSecrets } from '../../src/core/scope.js'
import { operationCode, scopeKeys } from '../../src/core/store-key.js'
import { gate, sleep } from '../helpers/executor-harness.js'
import { type FaultyStore, faultyStore } from '../helpers/faulty-store.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const secrets = parseSecrets({ current: 2, keys: { 1: 'a'.repeat(32), 2: 'b'.repeat(32) } })
const operation = 'POST /orders'

describe.each(STORES)('keyFor of the executor on the %s store', (_name, create) => {
  let backing: TestStore
  let store: FaultyStore

  beforeEach(async () => {
    backing = await create()
    store = faultyStore(backing.store)
  })

  afterEach(async () => {
    await backing.teardown()
  })

  function keysOf(key: string) {
    return scopeKeys(store.keyPrefix, secrets, operationCode(operation), { principal: 'alice', key, operation })
  }

  function run(key: string, action: (context: ActionContext) => unknown, leaseMs = 5_000) {
    return execute<unknown>({
      store,
      key,
      operation,
      fingerprint: 'f1:aa',
      codec: jsonCodec(),
      policy: resolvePolicy({ leaseMs, expiredExecution: 'takeover' }),
      secrets,
      action,
    })
  }

  it('derives the same key on a takeover\u2019s re-run as on the first execution', async () => {
    const [current] = keysOf(`k-${Math.random()}`)
    const key = current?.key as string
    const seen: string[] = []
    const hold = gate()
    const first = run(
      key,
      (context) => {
        // No renewal from the start of the action on: its lease runs out while it runs.
        store.block('renew', 'not-sent')
        seen.push(context.keyFor('charge'))
        return hold.promise
      },
      90,
    )
    // Until the first lease has run out the claim answers IN_PROGRESS; then it takes over.
    let second: Awaited<ReturnType<typeof run>> | undefined
    const until = Date.now() + 20_000
    while (second === undefined || second.kind === 'IN_PROGRESS') {
      if (Date.now() > until) throw new Error(`no takeover within 20 s: ${JSON.stringify(second)}`)
      await sleep(50)
      second = await run(key, ({ keyFor }) => keyFor('charge'), 90)
    }
    store.block('renew', undefined)
    hold.open()
    await first

    expect(second).toMatchObject({ kind: 'EXECUTED', attempt: 2 })
    expect(seen).toHaveLength(1)
    expect((second as { value: unknown }).value).toBe(seen[0])
    expect(seen[0]).toBe(derivedKey(secrets, 2, current?.digest as string, 'charge'))
  })

  it('derives under the version of the key it holds, another key for another scope', async () => {
    const [current, older] = keysOf(`k-${Math.random()}`)
    const [other] = keysOf(`k-${Math.random()}`)

    const onOlder = await run(older?.key as string, ({ keyFor }) => [keyFor('charge'), keyFor('charge:7')])
    const onCurrent = await run(current?.key as string, ({ keyFor }) => keyFor('charge'))
    const onOther = await run(other?.key as string, ({ keyFor }) => keyFor('charge'))

    expect(onOlder).toMatchObject({
      kind: 'EXECUTED',
      value: [
        derivedKey(secrets, 1, older?.digest as string, 'charge'),
        derivedKey(secrets, 1, older?.digest as string, 'charge:7'),
      ],
    })
    expect(onCurrent).toMatchObject({
      kind: 'EXECUTED',
      value: derivedKey(secrets, 2, current?.digest as string, 'charge'),
    })
    expect((onOther as { value: string }).value).not.toBe((onCurrent as { value: string }).value)
  })

  it('resumes a record abandoned under an older secret version where it is, with that version\u2019s keys', async () => {
    const key = `k-${Math.random()}`
    const scoped = (
      withSecrets: typeof secrets,
      policy: ReturnType<typeof resolvePolicy>,
      action: (context: ActionContext) => unknown,
    ) =>
      execute<unknown>({
        store,
        scope: { principal: 'alice', key },
        operation,
        fingerprint: 'f1:aa',
        codec: jsonCodec(),
        policy,
        secrets: withSecrets,
        action,
      })
    const before = parseSecrets({ current: 1, keys: { 1: 'a'.repeat(32) } })
    const sent: string[] = []
    // Under secret 1: the run sends its charge, then throws (not retryable): ABANDONED.
    const first = await scoped(before, resolvePolicy({}), ({ keyFor }) => {
      sent.push(keyFor('charge'))
      throw new Error('the order service fell over after the charge')
    })
    expect(first).toMatchObject({ kind: 'FAILED', attempt: 1 })
    // Rotated to secret 2: without resume, recovery is required; with it, the run resumes
    // under secret 1's key and derives the key the first run sent.
    expect(await scoped(secrets, resolvePolicy({}), () => 'ran')).toMatchObject({ kind: 'RECOVERY_REQUIRED' })
    const resumed = await scoped(secrets, resolvePolicy({ expiredExecution: 'resume' }), ({ keyFor, fencingToken }) => [
      keyFor('charge'),
      fencingToken,
    ])

    const [current, older] = keysOf(key)
    expect(resumed).toMatchObject({ kind: 'EXECUTED', attempt: 2, value: [sent[0], 2] })
    expect(sent[0]).toBe(derivedKey(secrets, 1, older?.digest as string, 'charge'))
    expect(await store.inspect(current?.key as string, 'f'.repeat(64))).toEqual({ kind: 'ABSENT' })
    expect(await scoped(secrets, resolvePolicy({ expiredExecution: 'resume' }), () => 'again')).toMatchObject({
      kind: 'REPLAYED',
      value: [sent[0], 2],
    })
  })

  it('throws ERR_IDEM_INVALID_OPTION naming "secrets" when the executor has none', async () => {
    const [current] = keysOf(`k-${Math.random()}`)
    const outcome = await execute<unknown>({
      store,
      key: current?.key as string,
      operation,
      fingerprint: 'f1:aa',
      codec: jsonCodec(),
      policy: resolvePolicy({}),
      action: ({ keyFor }) => keyFor('charge'),
    })

    expect(outcome).toMatchObject({
      kind: 'FAILED',
      settled: {
        ok: false,
        error: expect.objectContaining({
          code: 'ERR_IDEM_INVALID_OPTION',
          message: expect.stringMatching(/"secrets"/),
        }),
      },
    })
  })
})
