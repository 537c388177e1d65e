/**
 * The `idemkit/fetch` entry: the wrapper of Web-standard `(request: Request) => Response`
 * handlers (Next.js route handlers, Bun, Deno, React Router and SvelteKit actions): the factory
 * (default export, and named), `withIdempotency`, `idempotencyOf`, the stores, the errors and the
 * public types.
 */
import { idempotency, idempotencyOf, withIdempotency } from './handler.js'

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
  FetchHandler,
  FetchIdempotency,
  FetchIdempotencyOptions,
  FetchIdempotencyRouteOptions,
} from './handler.js'
export { idempotency, idempotency as fetchIdempotency, idempotencyOf, withIdempotency }
export default idempotency
