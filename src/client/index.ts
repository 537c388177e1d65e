/**
 * The client (`idemkit/client`): `idempotentFetch`, a `fetch` that sends an `Idempotency-Key`
 * with every unsafe request and retries it, with that key, while the answer says a retry may
 * succeed (docs/across-services.md). No dependency beyond the platform's `fetch`.
 */

export { ErrorCode, IdempotencyError } from '../core/errors.js'
export type {
  IdempotentFetch,
  IdempotentFetchOptions,
  IdempotentRequestInit,
  RetryEvent,
} from './idempotent-fetch.js'
export { idempotentFetch } from './idempotent-fetch.js'
