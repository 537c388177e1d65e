/**
 * The `idemkit/nestjs` entry: the Nest module, the route and parameter decorators, the
 * interceptor behind them, the stores, the errors and the public types.
 */
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
export { IdempotencyInfo, Idempotent, type NestIdempotencyRouteOptions } from './decorators.js'
export { IdempotencyInterceptor } from './interceptor.js'
export {
  IDEMPOTENCY_OPTIONS,
  IdempotencyModule,
  type NestIdempotencyAsyncOptions,
  type NestIdempotencyOptions,
} from './module.js'
export { IdempotencyRegistry, type NestRequest } from './registry.js'
