/**
 * Type augmentation: `req.idempotency` on Express's request.
 */
import type { IdempotencyInfo } from '../../src/http/guard.js'

declare global {
  namespace Express {
    interface Request {
      /**
       * Set while an idempotent handler runs (fencing token, AbortSignal, digest prefix) and on
       * replays; `null` on requests the middleware did not protect.
       */
      idempotency: IdempotencyInfo | null
    }
  }
}
