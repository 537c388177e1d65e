/**
 * The `idemkit/koa` entry: the Koa 2 and 3 middleware factory (default export, and named), the
 * stores, the errors and the public types.
 */
import { idempotency } from './middleware.js'

export type { IdempotencyInfo } from '../../src/http/guard.js'
export type { IdempotencyOptions } from '../../src/http/options.js'
export { ProblemCode, problemType } from '../../src/http/problem.js'
export type { CapturedResponse } from '../../src/http/response-codec.js'
export type { RouteOptions } from '../../src/http/route-options.js'
export type {
  IdempotencyEvent,
  IdempotencyStore,
  MemoryStoreOptions,
  OutcomeEvent,
  PostgresStoreEvent,
  PostgresStoreOptions,
  RedisServerReport,
  RedisStoreEvent,
  RedisStoreOptions,
} from '../../src/index.js'
export {
  ErrorCode,
  IdempotencyError,
  memoryStore,
  postgresStore,
  redisStore,
  StoreIndeterminateError,
  StoreProtocolError,
  StoreUnavailableError,
} from '../../src/index.js'
export type {
  KoaIdempotency,
  KoaIdempotencyOptions,
  KoaIdempotencyRouteOptions,
  KoaIdempotencyState,
} from './middleware.js'
export { idempotency, idempotency as koaIdempotency }
export default idempotency
