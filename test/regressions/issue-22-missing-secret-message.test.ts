/**
 * Issue 22: with IDEMPOTENCY_SECRET unset, the quick start crashed with `"secrets.current" must
 * be a positive integer with a secret in "secrets.keys"; got 1.`, which names neither what is
 * missing nor what to do. The message now names the version, the option to set and how to make
 * a secret.
 */
import Fastify from 'fastify'
import { describe, expect, it } from 'vitest'
import idempotency, { memoryStore } from '../../plugins/fastify/index.js'
import { ErrorCode } from '../../src/core/errors.js'
import { parseSecrets } from '../../src/core/scope.js'

describe('a current secret version without a secret', () => {
  it('names the missing version, the option and the unset value', () => {
    const unset: string | undefined = undefined
    expect(() => parseSecrets({ current: 1, keys: { 1: unset } })).toThrow(
      expect.objectContaining({
        code: ErrorCode.INVALID_SECRET,
        message: expect.stringMatching(
          /^No secret for version 1, the "secrets\.current" version: set "secrets\.keys\.1" \(it is undefined: an environment variable not set\?\) to a secret of at least 32 bytes, e\.g\. the output of `openssl rand -hex 32`/,
        ),
      }),
    )
  })

  it('names the version when the keys hold only other versions', () => {
    expect(() => parseSecrets({ current: 3, keys: { 1: 's'.repeat(32) } })).toThrow(
      /^No secret for version 3, the "secrets\.current" version: set "secrets\.keys\.3" to a secret/,
    )
  })

  it('is what registering the plugin with an unset environment variable throws', async () => {
    const app = Fastify()
    const register = app.register(idempotency, {
      store: memoryStore(),
      secrets: { current: 1, keys: { 1: process.env.IDEMKIT_TEST_VARIABLE_NEVER_SET } },
      anonymous: true,
    })
    await expect(register).rejects.toThrow(/No secret for version 1, the "secrets\.current" version/)
    await app.close().catch(() => undefined)
  })

  it('still refuses a current version that is not a positive integer, naming the option', () => {
    expect(() => parseSecrets({ current: 0, keys: { 1: 's'.repeat(32) } })).toThrow(
      /^"secrets\.current" must be a positive integer \(a version in "secrets\.keys"\); got 0\./,
    )
  })
})
