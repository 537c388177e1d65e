/**
 * The package's main entry, and `idemkit/fastify`: the Fastify 4 and 5 plugin (default export,
 * and named), the stores, the errors and the public types.
 */
import { fastifyIdempotency } from './plugin.js'

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
export type { FastifyIdempotencyOptions, FastifyIdempotencyRouteOptions } from './plugin.js'
export { fastifyIdempotency, fastifyIdempotency as idempotency }
export default fastifyIdempotency
