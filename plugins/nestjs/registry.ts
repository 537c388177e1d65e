/**
 * The options of one Nest application, parsed once, and what is built from them once per
 * route: its resolved route options (checked at bootstrap, so a bad `@Idempotent({...})`
 * fails the start, as on the other adapters) and its guards, one per operation.
 */
import type { IncomingHttpHeaders } from 'node:http'
import { Logger } from '@nestjs/common'
import type { DiscoveryService } from '@nestjs/core'
import { type GuardLogger, type RouteGuard, routeGuards } from '../../src/http/guard.js'
import { type IdempotencyOptions, parseOptions, type ResolvedOptions } from '../../src/http/options.js'
import {
  checkTransactionStore,
  type ResolvedRoute,
  type RouteOptions,
  resolveRoute,
} from '../../src/http/route-options.js'
import { reportStore } from '../../src/http/startup.js'

/** The request a handler sees: Express's `Request` on platform-express, a `FastifyRequest` on platform-fastify. */
// biome-ignore lint/suspicious/noExplicitAny: the request's shape is the platform's and the application's
export type NestRequest = { readonly headers: IncomingHttpHeaders } & Record<string, any>

/** Where `@Idempotent()` keeps its route options on the handler. */
export const ROUTE_METADATA = 'idemkit:route'

/** The application's options and its per-route guards. */
export class IdempotencyRegistry {
  readonly options: ResolvedOptions<NestRequest>
  readonly log: GuardLogger
  readonly #discovery: DiscoveryService | undefined
  readonly #routes = new WeakMap<object, ResolvedRoute<NestRequest>>()
  readonly #guards = new WeakMap<object, (operation: string) => RouteGuard<NestRequest>>()

  constructor(input: IdempotencyOptions<NestRequest>, discovery?: DiscoveryService) {
    this.options = parseOptions(input)
    this.log = nestLogger(new Logger('Idempotency'))
    this.#discovery = discovery
  }

  /** Resolves every `@Idempotent()` route now, then logs the store's startup report. */
  onApplicationBootstrap(): void {
    for (const wrapper of this.#discovery?.getControllers() ?? []) {
      const instance: unknown = wrapper.instance
      if (typeof instance !== 'object' || instance === null) continue
      // The controller's methods, inherited ones too (as Nest's router finds them).
      for (let at = Object.getPrototypeOf(instance); at !== null && at !== Object.prototype; ) {
        for (const name of Object.getOwnPropertyNames(at)) {
          const method = Object.getOwnPropertyDescriptor(at, name)?.value
          if (typeof method === 'function') this.routeOf(method, `route ${wrapper.name}.${name}: `)
        }
        at = Object.getPrototypeOf(at)
      }
    }
    void reportStore(this.options.store, this.log)
  }

  /** The resolved options of an `@Idempotent()` handler, or `undefined` for any other. */
  routeOf(handler: object, where = ''): ResolvedRoute<NestRequest> | undefined {
    const known = this.#routes.get(handler)
    if (known !== undefined) return known
    const annotation = Reflect.getMetadata(ROUTE_METADATA, handler) as RouteOptions<NestRequest> | true | undefined
    if (annotation === undefined) return undefined
    const route = resolveRoute(annotation, this.options.route, where)
    checkTransactionStore(route, this.options.store, where)
    this.#routes.set(handler, route)
    return route
  }

  /** The guard of one handler for one operation (`METHOD /route/pattern`), built once. */
  guardOf(handler: object, route: ResolvedRoute<NestRequest>, operation: string): RouteGuard<NestRequest> {
    let guardFor = this.#guards.get(handler)
    if (guardFor === undefined) {
      guardFor = routeGuards(this.options, route)
      this.#guards.set(handler, guardFor)
    }
    return guardFor(operation)
  }
}

/** Nest's logger in the guard's shape: the message, then the fields as JSON. */
function nestLogger(logger: Logger): GuardLogger {
  const line = (message: string, object: object) => `${message} ${JSON.stringify(object, errorFields)}`
  return {
    info: (object, message) => logger.log(line(message, object)),
    warn: (object, message) => logger.warn(line(message, object)),
    error: (object, message) => logger.error(line(message, object)),
  }
}

function errorFields(_key: string, value: unknown): unknown {
  return value instanceof Error ? { name: value.name, message: value.message } : value
}
