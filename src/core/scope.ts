/**
 * Scope digest (docs/design.md §2): HMAC-SHA256(secret[v], encode("idem-scope", v, principal, key,
 * operation)) in lowercase hex. The raw key and the principal never reach the store or the
 * logs; the digest stands for them.
 */
import { HMAC_HEADROOM, HmacSha256 } from './digest.js'
import { encodeFields } from './encoding.js'
import { ErrorCode, IdempotencyError, invalidOption } from './errors.js'

/** Minimum secret length in bytes (HMAC-SHA256's block-size-independent security level). */
export const MIN_SECRET_BYTES = 32

/** Versioned secrets: `keys[current]` digests new scopes; older versions are read-only. */
export interface SecretsInput {
  /** The version used for new records: a positive integer present in `keys`. */
  readonly current: number
  /** Secret per version: at least 32 bytes (UTF-8 length for strings). */
  readonly keys: Readonly<Record<number | string, string | Uint8Array | undefined>>
}

/** Secrets parsed once: HMAC keys prepared, versions sorted newest first. */
export interface Secrets {
  readonly current: number
  /** Every configured version, `current` first, then older ones from newest to oldest. */
  readonly versions: readonly number[]
  key(version: number): HmacSha256
}

/**
 * The `secrets` option of the adapters and of `idempotent()`: required, then parsed.
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` when it is missing; else as `parseSecrets`.
 */
export function secretsOption(input: SecretsInput | undefined): Secrets {
  if (input === undefined) invalidOption('secrets', '{ current, keys: { [version]: secret } }', undefined)
  return parseSecrets(input)
}

/**
 * Validates and prepares versioned secrets.
 * @throws IdempotencyError `ERR_IDEM_INVALID_SECRET` for a missing current version, a version
 *   that is not a positive integer, or a secret shorter than 32 bytes.
 */
export function parseSecrets(input: SecretsInput): Secrets {
  if (input === null || typeof input !== 'object' || input.keys === null || typeof input.keys !== 'object') {
    throw invalidSecret('"secrets" must be { current: <version>, keys: { <version>: <secret> } }.')
  }
  const keys = new Map<number, HmacSha256>()
  for (const [name, secret] of Object.entries(input.keys)) {
    if (secret === undefined) continue
    const version = Number(name)
    if (!Number.isSafeInteger(version) || version < 1 || String(version) !== name) {
      throw invalidSecret(`Secret version "${name}" must be a positive integer.`)
    }
    const bytes = typeof secret === 'string' ? Buffer.from(secret, 'utf8') : Buffer.from(secret)
    if (bytes.byteLength < MIN_SECRET_BYTES) {
      throw invalidSecret(
        `Secret version ${version} is ${bytes.byteLength} bytes; at least ${MIN_SECRET_BYTES} are required (e.g. 32 random bytes as 64 hex characters).`,
      )
    }
    keys.set(version, new HmacSha256(bytes))
  }
  const current = input.current
  if (!Number.isSafeInteger(current) || current < 1) {
    throw invalidSecret(
      `"secrets.current" must be a positive integer (a version in "secrets.keys"); got ${String(current)}.`,
    )
  }
  if (!keys.has(current)) {
    const unset = Object.hasOwn(input.keys, String(current))
      ? ' (it is undefined: an environment variable not set?)'
      : ''
    throw invalidSecret(
      `No secret for version ${current}, the "secrets.current" version: set "secrets.keys.${current}"${unset} to a secret of at least ${MIN_SECRET_BYTES} bytes, e.g. the output of \`openssl rand -hex 32\` in the variable your app reads it from.`,
    )
  }
  const versions = [current, ...[...keys.keys()].filter((v) => v !== current).sort((a, b) => b - a)]
  return {
    current,
    versions,
    key(version) {
      const key = keys.get(version)
      if (key === undefined) throw invalidSecret(`No secret is configured for version ${version}.`)
      return key
    },
  }
}

/** What identifies one scope (docs/design.md §2): who, which key, which operation. */
export interface ScopeInput {
  readonly principal: string
  readonly key: string
  readonly operation: string
}

/**
 * Computes the scope digest under one secret version.
 * @returns 64 lowercase hex characters.
 */
export function scopeDigest(secrets: Secrets, version: number, scope: ScopeInput): string {
  for (const name of ['principal', 'key', 'operation'] as const) {
    if (typeof scope[name] !== 'string') {
      throw new IdempotencyError(ErrorCode.INVALID_ARGUMENT, `The scope's ${name} must be a string.`)
    }
  }
  const key = secrets.key(version)
  return key.macWithHeadroom(
    encodeFields(['idem-scope', String(version), scope.principal, scope.key, scope.operation], HMAC_HEADROOM),
  )
}

function invalidSecret(message: string): IdempotencyError {
  return new IdempotencyError(ErrorCode.INVALID_SECRET, message)
}
