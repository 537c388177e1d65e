/**
 * Issue 10, item 2: the key header was trimmed with JavaScript's Unicode `trim()`, so a key sent
 * with NBSP (byte 0xA0, which Node decodes as U+00A0) before or after it was accepted and aliased
 * to the key without it. Only SP and HTAB are optional whitespace (RFC 9110 §5.5); any other byte
 * outside visible ASCII, at any position, is 400 IDEMPOTENCY_KEY_INVALID. Sent byte for byte over
 * a raw socket to both adapters.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ADAPTERS, type RunningApp, sendRaw } from '../helpers/adapters.js'
import { STORES, type TestStore } from '../helpers/stores.js'

const BODY = JSON.stringify({ item: 'book', qty: 1 })

function post(app: RunningApp, user: string, keyBytes: string) {
  return sendRaw(
    app,
    [
      'POST /orders HTTP/1.1',
      `Host: 127.0.0.1:${app.port}`,
      `Authorization: Bearer ${user}`,
      'Content-Type: application/json',
      `Idempotency-Key: ${keyBytes}`,
    ],
    BODY,
  )
}

const isOws = (b: number) => b === 0x20 || b === 0x09
const isBareKeyByte = (b: number) => b >= 0x21 && b <= 0x7e && b !== 0x22 && b !== 0x2c

const CASES = ADAPTERS.flatMap(([adapterName, adapter]) =>
  STORES.map(([storeName, create]) => [adapterName, storeName, adapter, create] as const),
)

describe.each(CASES)('the key header on %s with the %s store', (_adapterName, _storeName, adapter, create) => {
  let backing: TestStore
  let app: RunningApp

  beforeAll(async () => {
    backing = await create()
    app = await adapter.example(backing.store)
  })

  afterAll(async () => {
    await app.close()
    await backing.teardown()
  })

  it.each([
    ['before the key', (c: string, k: string) => `${c}${k}`],
    ['after the key', (c: string, k: string) => `${k}${c}`],
    ['before the quoted key', (c: string, k: string) => `${c}"${k}"`],
    ['after the quoted key', (c: string, k: string) => `"${k}"${c}`],
  ])('refuses NBSP (0xA0) %s and never replays the key without it', async (_where, form) => {
    const key = randomUUID()

    const nbsp = await post(app, 'nbsp', form('\u00a0', key))
    const plain = await post(app, 'nbsp', key)

    expect(nbsp.status).toBe(400)
    expect(JSON.parse(nbsp.body)).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID' })
    expect(plain.status).toBe(201)
    expect(plain.headers.toLowerCase()).not.toContain('idempotent-replayed')
  })

  it('accepts only SP and HTAB around a key, for every byte value before and after it', async () => {
    const wrong: string[] = []
    for (let b = 0; b < 256; b++) {
      if (b === 0x0a || b === 0x0d) continue // they end the header line: another request
      const c = String.fromCharCode(b)
      for (const [where, form] of [
        ['before', (k: string) => `${c}${k}`],
        ['after', (k: string) => `${k}${c}`],
      ] as const) {
        const key = `k${b}${where}${randomUUID()}`
        const valid = isOws(b) || isBareKeyByte(b)

        const first = await post(app, 'bytes', form(key))
        const plain = await post(app, 'bytes', key)

        // Node refuses control bytes itself (a plain 400); every other refusal is the layer's.
        const firstOk = valid
          ? first.status === 201
          : first.status === 400 && (b < 0x20 || b === 0x7f || first.body.includes('IDEMPOTENCY_KEY_INVALID'))
        const replayed = plain.headers.toLowerCase().includes('idempotent-replayed: true')
        const plainOk = plain.status === 201 && replayed === isOws(b)
        if (!firstOk || !plainOk)
          wrong.push(`0x${b.toString(16)} ${where}: ${first.status} then ${plain.status}${replayed ? ' replayed' : ''}`)
      }
    }
    expect(wrong).toEqual([])
  }, 60_000)
})
