/**
 * The `idemkit/express` entry: the Express 5 middleware factory (default export, and named),
 * the stores, the errors and the public types.
 */
import { idempotency } from './middleware.js'

export { idempotency, idempotency as expressIdempotency }
export type { ExpressIdempotency, ExpressIdempotencyOptions, ExpressIdempotencyRouteOptions } from './middleware.js'
export {
  ErrorCode,
  IdempotencyError,
  StoreIndeterminateError,
  StoreProtocolError,
  StoreUnavailableError,
  memoryStore,
  redisStore,
} from '../../src/index.js'
export type {
  MemoryStoreOptions,
  RedisServerReport,
  RedisStoreEvent,
  RedisStoreOptions,
  IdempotencyStore,
} from '../../src/index.js'
export { ProblemCode, problemType } from '../../src/http/problem.js'
export type { IdempotencyInfo } from '../../src/http/guard.js'
export type { CapturedResponse } from '../../src/http/response-codec.js'
export type { IdempotencyOptions, RouteOptions } from '../../src/http/options.js'
export default idempotency
