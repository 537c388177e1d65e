/**
 * Type augmentation (STYLE 8): the route config annotation and the request decoration.
 */
import type { FastifyRequest } from 'fastify'
import type { IdempotencyInfo } from '../../src/http/guard.js'
import type { RouteOptions } from '../../src/http/options.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Opt this route in: `true` for the plugin's defaults, or an object of route options. */
    idempotency?: boolean | RouteOptions<FastifyRequest>
  }
  interface FastifyRequest {
    /** Set on idempotent routes while the handler runs (and on replays); `null` elsewhere. */
    idempotency: IdempotencyInfo | null
  }
}
