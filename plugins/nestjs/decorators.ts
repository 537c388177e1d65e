/**
 * `@Idempotent()` opts a route in; `@IdempotencyInfo()` gives its handler the request's
 * idempotency (fencing token, signal), `null` when the request is not protected.
 */
import 'reflect-metadata'
import { createParamDecorator, type ExecutionContext, SetMetadata, UseInterceptors } from '@nestjs/common'
import type { IdempotencyInfo as Info } from '../../src/http/guard.js'
import type { RouteOptions } from '../../src/http/route-options.js'
import { guardedHandler, IdempotencyInterceptor, infoParameter } from './interceptor.js'
import { type NestRequest, ROUTE_METADATA } from './registry.js'

/** Route options of `@Idempotent({ ... })`: the same as on the Fastify plugin and the Express middleware. */
export type NestIdempotencyRouteOptions = RouteOptions<NestRequest>

/**
 * Protects a route with the module's options, or with these overrides (validated when the
 * application starts). The claim runs when the handler is called, after guards and pipes.
 * @example
 * ‎@Post('orders') @Idempotent() create(@Body() order: OrderDto, @IdempotencyInfo() idem: IdempotencyInfo | null)
 */
export function Idempotent(route: NestIdempotencyRouteOptions | true = true): MethodDecorator {
  return function idempotent<T>(target: object, key: string | symbol, descriptor: TypedPropertyDescriptor<T>) {
    const original = descriptor.value
    if (typeof original !== 'function') throw new TypeError('@Idempotent() decorates a method.')
    const guarded = guardedHandler(original as (...args: unknown[]) => unknown, key)
    // What the decorators below this one put on the method goes with it.
    for (const name of Reflect.getOwnMetadataKeys(original)) {
      Reflect.defineMetadata(name, Reflect.getOwnMetadata(name, original), guarded)
    }
    descriptor.value = guarded as T
    SetMetadata(ROUTE_METADATA, route)(target, key, descriptor)
    UseInterceptors(IdempotencyInterceptor)(target, key, descriptor)
    return descriptor
  }
}

function idempotencyInfo(_data: unknown, context: ExecutionContext): unknown {
  return infoParameter(context.switchToHttp().getRequest<NestRequest>())
}

/** The parameter decorator: `@IdempotencyInfo() idempotency: IdempotencyInfo | null`. */
export const IdempotencyInfo: () => ParameterDecorator = createParamDecorator(idempotencyInfo)
/** What a handler sees of idempotency (the same as Fastify's `request.idempotency`). */
export type IdempotencyInfo = Info
