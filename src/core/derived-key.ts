/**
 * Keys derived for a run's downstream calls (docs/design.md §2, "Derived key"):
 * HMAC-SHA256(secret[v], encode("idem-derived", v, scope digest, name)), so every execution of
 * one scope (the first, a takeover, a resumed re-run) sends the same key to the call named
 * `name`, and nobody without the secret can compute or link them.
 */
import { HMAC_HEADROOM, type HmacSha256 } from './digest.js'
import { encodeFields } from './encoding.js'
import { ErrorCode, IdempotencyError } from './errors.js'
import type { Secrets } from './scope.js'

/**
 * The form of a derived key. `'base64url'`: 43 characters of `A-Z a-z 0-9 - _` (the 256-bit MAC
 * whole). `'uuid'`: a UUID (RFC 9562 version 8, 122 bits of the MAC) for APIs that accept only
 * UUIDs.
 */
export type DerivedKeyFormat = 'base64url' | 'uuid'

/** How `keyFor(name, options)` shapes its key. */
export interface KeyForOptions {
  /** @default 'base64url' */
  readonly format?: DerivedKeyFormat
}

/** Derives the key of a downstream call: `keyFor(name)` of the action's context. */
export type KeyFor = (name: string, options?: KeyForOptions) => string

/** The digest version and scope digest a store key ends with: `…:d<v>:<opcode>:<digest>` (`storeKey()`). */
const STORE_KEY_TAIL = /:d([1-9][0-9]{0,15}):[^:]*:([^:]+)$/

/**
 * The derived key of `name` for the scope digest `digest` under secret version `version`.
 * @throws IdempotencyError `ERR_IDEM_INVALID_ARGUMENT` when `name` is not a non-empty string or
 *   the format is unknown; `ERR_IDEM_INVALID_SECRET` when no secret of `version` is configured.
 */
export function derivedKey(
  secrets: Secrets,
  version: number,
  digest: string,
  name: string,
  options?: KeyForOptions,
): string {
  if (typeof name !== 'string' || name === '') {
    throw new IdempotencyError(
      ErrorCode.INVALID_ARGUMENT,
      `keyFor(name) takes a non-empty string naming the downstream call (e.g. 'charge' or \`charge:\${line.id}\`); got ${describe(name)}.`,
    )
  }
  const format = options?.format ?? 'base64url'
  if (format !== 'base64url' && format !== 'uuid') {
    throw new IdempotencyError(
      ErrorCode.INVALID_ARGUMENT,
      `keyFor's "format" is 'base64url' or 'uuid'; got ${describe(format)}.`,
    )
  }
  return shape(mac(secrets.key(version), version, digest, name), format)
}

/**
 * The `keyFor` of the run that holds `storeKey`: the version and digest come from the key the
 * record lives under, so a re-run of a record found under an older secret derives that
 * version's keys. Derived once per name and run.
 * @throws IdempotencyError `ERR_IDEM_INVALID_ARGUMENT` when `storeKey` is not of `storeKey()`'s layout.
 */
export function keyDeriver(secrets: Secrets, storeKey: string): KeyFor {
  const tail = STORE_KEY_TAIL.exec(storeKey)
  if (tail === null) {
    throw new IdempotencyError(
      ErrorCode.INVALID_ARGUMENT,
      'keyFor needs the run\'s key to be a store key made by storeKey() or scopeKeys() ("…:d<version>:<opcode>:<digest>").',
    )
  }
  const version = Number(tail[1])
  const digest = tail[2] as string
  const known = new Map<string, string>()
  return function keyFor(name, options) {
    const id = options?.format === 'uuid' ? `u${name}` : `b${name}`
    let key = known.get(id)
    if (key === undefined) {
      key = derivedKey(secrets, version, digest, name, options)
      known.set(id, key)
    }
    return key
  }
}

/** A `keyFor` for a context that has no secrets to derive with: it says what to configure. */
export function noKeyFor(): never {
  throw new IdempotencyError(
    ErrorCode.INVALID_OPTION,
    'keyFor needs the executor\'s "secrets" option (the same secrets the scope digests are made with): pass secrets to execute() or new Executor().',
  )
}

function mac(key: HmacSha256, version: number, digest: string, name: string): Buffer {
  return Buffer.from(
    key.macWithHeadroom(encodeFields(['idem-derived', String(version), digest, name], HMAC_HEADROOM)),
    'hex',
  )
}

function shape(bytes: Buffer, format: DerivedKeyFormat): string {
  if (format === 'base64url') return bytes.toString('base64url')
  // RFC 9562 §5.8: version 8 in the high nibble of byte 6, variant 0b10 in byte 8.
  bytes[6] = ((bytes[6] as number) & 0x0f) | 0x80
  bytes[8] = ((bytes[8] as number) & 0x3f) | 0x80
  const hex = bytes.toString('hex', 0, 16)
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`
}

function describe(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : typeof value
}
