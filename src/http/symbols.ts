/**
 * The symbols the adapters keep their state under, on objects the framework owns (requests,
 * contexts, route configs). One per thing marked, each with its own description, so a request
 * seen by two adapters (an Express middleware inside a NestJS app on platform-express) shows
 * which one took it.
 */

/** On a Fastify request: what it carries from hook to hook (its input, its run, the handler's error). */
export const kFastifyRequestState: unique symbol = Symbol('idemkit.fastify.requestState')
/** On a Fastify route config: the plugin has resolved this route (Fastify copies it with the config). */
export const kFastifyRouteResolved: unique symbol = Symbol('idemkit.fastify.routeResolved')
/** On an Express request: the middleware guards it (set once) and the error its handler passed on. */
export const kExpressRequestState: unique symbol = Symbol('idemkit.express.requestState')
/** On an Express request: the request as the body parser left it, recorded by `idem.captureBody`. */
export const kExpressParsedInput: unique symbol = Symbol('idemkit.express.parsedInput')
/** On a Hono Context: the middleware has taken this request (a second one lets it through). */
export const kHonoTaken: unique symbol = Symbol('idemkit.hono.taken')
/** On a NestJS request: the interceptor has taken it (a second interceptor passes it on). */
export const kNestTaken: unique symbol = Symbol('idemkit.nestjs.taken')
/** A NestJS handler's `@IdempotencyInfo()` argument until the claim has given the request its info. */
export const kNestInfoSlot: unique symbol = Symbol('idemkit.nestjs.infoSlot')
/** On a Koa context: the middleware guards it (set once) and the error the handler threw. */
export const kKoaRequestState: unique symbol = Symbol('idemkit.koa.requestState')
