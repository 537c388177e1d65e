/**
 * Store keys (docs/design.md §2): `<prefix>:idem:<layout>:d<v>:<opcode>:<digest>`. One scope, one key,
 * so every script touches exactly one key and Redis Cluster works unchanged.
 */
import { createHash } from 'node:crypto'
import { type ScopeInput, type Secrets, scopeDigest } from './scope.js'

/** Version of the key layout; bump it when the layout changes. */
export const KEY_LAYOUT = '1'

/**
 * A short stable code for an operation: the first 8 hex characters of SHA-256 over its name.
 * It keeps keys short and groups one operation's keys for `SCAN` without naming the route.
 */
export function operationCode(operation: string): string {
  return createHash('sha256').update(operation, 'utf8').digest('hex').slice(0, 8)
}

/** Builds the store key of one scope digest. */
export function storeKey(prefix: string, digestVersion: number, opcode: string, digest: string): string {
  return `${prefix}:idem:${KEY_LAYOUT}:d${digestVersion}:${opcode}:${digest}`
}

/** A scope's store key under one secret version. */
export interface ScopeKey {
  readonly version: number
  /** The scope digest under this version: 64 lowercase hex characters. */
  readonly digest: string
  readonly key: string
}

/**
 * A scope's store key under every secret version, the current one first (`secrets.versions`):
 * the key a new record is written under, then those an older secret wrote (docs/design.md §2).
 * @param prefix the store's `keyPrefix`.
 * @param opcode the operation's code (`operationCode()`).
 */
export function scopeKeys(prefix: string, secrets: Secrets, opcode: string, scope: ScopeInput): ScopeKey[] {
  return secrets.versions.map((version) => {
    const digest = scopeDigest(secrets, version, scope)
    return { version, digest, key: storeKey(prefix, version, opcode, digest) }
  })
}

/**
 * The short name logs and operators give a record: the first 12 hex characters of its scope
 * digest, from a store key (its last 64 characters are the digest) or from the digest itself.
 */
export function shortDigest(keyOrDigest: string): string {
  return keyOrDigest.slice(-64, -52)
}
