/**
 * docs/design.md §7 defect 6: codec and policy revision were stored but never compared. Here a replay of
 * a record this deployment cannot read is recovery-required, never a wrong body.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { type Codec, jsonCodec } from '../../src/core/codec.js'
import { harness } from '../helpers/executor-harness.js'
import { STORES, type TestStore } from '../helpers/stores.js'

describe.each(STORES)('defect 6 on the %s store', (_name, create) => {
  let backing: TestStore

  beforeEach(async () => {
    backing = await create()
  })

  afterEach(async () => {
    await backing.teardown()
  })

  it('refuses to replay under another codec id or another policy revision', async () => {
    const h = harness(backing.store)
    const v1: Codec<unknown> = {
      id: 'base64-1',
      encode: (v) => Buffer.from(Buffer.from(JSON.stringify(v)).toString('base64')),
      decode: (d) => JSON.parse(Buffer.from(d.toString(), 'base64').toString()),
    }
    await h.run({ codec: v1 })

    expect(await h.run({ codec: jsonCodec('json-1') })).toEqual({ kind: 'RECOVERY_REQUIRED', reason: 'CODEC_MISMATCH' })
    expect(await h.run({ codec: v1, policy: h.policy({ revision: '9' }) })).toEqual({
      kind: 'RECOVERY_REQUIRED',
      reason: 'POLICY_MISMATCH',
    })
    expect(await h.run({ codec: v1 })).toEqual({ kind: 'REPLAYED', value: { n: 1 } })
    expect(h.runs()).toBe(1)
  })
})
