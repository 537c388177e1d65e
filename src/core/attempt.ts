/**
 * One invocation's attempt (SPEC §2): a random 32-byte owner token created before the first
 * claim is sent and kept for every re-send of that invocation's calls. It is never shared by
 * two invocations, which is what lets a REPLAYED_ACQUIRE be treated as acquired (§3 step 5).
 */
import { randomBytes } from 'node:crypto'

/** Creates a fresh owner token: 64 lowercase hex characters. */
export function newOwnerToken(): string {
  return randomBytes(32).toString('hex')
}
