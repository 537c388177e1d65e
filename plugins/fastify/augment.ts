/**
 * Type augmentation: the route config annotation and the request decoration.
 */
import type { FastifyRequest } from 'fastify'
import type { IdempotencyInfo } from '../../src/http/guard.js'
import type { RouteOptions } from '../../src/http/route-options.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Opt this route in: `true` for the plugin's defaults, or an object of route options.
     * Fastify infers a route's config type from the literal written, so a misspelt key here is
     * no compile error by itself: write `{ leaseMs: 5_000 } satisfies
     * FastifyIdempotencyRouteOptions` to have the object checked. The plugin refuses unknown
     * keys when the route is added (`ERR_IDEM_INVALID_OPTION`) in any case.
     */
    idempotency?: boolean | RouteOptions<FastifyRequest>
  }
  interface FastifyRequest {
    /** Set on idempotent routes while the handler runs (and on replays); `null` elsewhere. */
    idempotency: IdempotencyInfo | null
  }
}
