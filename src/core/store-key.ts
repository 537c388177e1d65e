/**
 * Store keys (docs/design.md §2): `<prefix>:idem:<layout>:d<v>:<opcode>:<digest>`. One scope, one key,
 * so every script touches exactly one key and Redis Cluster works unchanged.
 */
import { createHash } from 'node:crypto'

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
