/**
 * One invocation's attempt (docs/design.md §2): a random 32-byte owner token created before the first
 * claim is sent and kept for every re-send of that invocation's calls. It is never shared by
 * two invocations, which is what lets a REPLAYED_ACQUIRE be treated as acquired (§3 step 5).
 */
import { randomFillSync } from 'node:crypto'

/** Tokens drawn per call to the CSPRNG: one system call serves this many invocations. */
const TOKENS_PER_FILL = 128
const TOKEN_BYTES = 32
const pool = Buffer.alloc(TOKEN_BYTES * TOKENS_PER_FILL)
let next = TOKENS_PER_FILL

/**
 * Creates a fresh owner token: 32 bytes from the operating system's CSPRNG, as 64 lowercase hex
 * characters. Bytes are drawn in batches (each byte handed out once), since a CSPRNG call per
 * request was a measurable share of a request's CPU time.
 */
export function newOwnerToken(): string {
  if (next === TOKENS_PER_FILL) {
    randomFillSync(pool)
    next = 0
  }
  const start = next * TOKEN_BYTES
  next++
  return pool.toString('hex', start, start + TOKEN_BYTES)
}
