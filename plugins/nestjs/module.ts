/**
 * `IdempotencyModule.forRoot(options)` / `forRootAsync({ imports, inject, useFactory })`: a
 * global module holding the application's parsed options, for every `@Idempotent()` route.
 */
import type { DynamicModule, FactoryProvider, ModuleMetadata, Provider } from '@nestjs/common'
import { DiscoveryModule, DiscoveryService } from '@nestjs/core'
import type { IdempotencyOptions } from '../../src/http/options.js'
import { IdempotencyRegistry, type NestRequest } from './registry.js'

/** Module options: the same as the Fastify plugin's, with the platform's request. */
export type NestIdempotencyOptions<Request extends object = NestRequest> = IdempotencyOptions<Request>

/** `forRootAsync`: options made by a factory, with injected providers (e.g. a ConfigService). */
export interface NestIdempotencyAsyncOptions<Request extends object = NestRequest> {
  readonly imports?: ModuleMetadata['imports']
  readonly inject?: FactoryProvider['inject']
  useFactory(...args: never[]): NestIdempotencyOptions<Request> | Promise<NestIdempotencyOptions<Request>>
}

/** The token of the options as given (before they are parsed). */
export const IDEMPOTENCY_OPTIONS = Symbol('idemkit.options')

// biome-ignore lint/complexity/noStaticOnlyClass: a Nest module is a class with static forRoot methods
export class IdempotencyModule {
  /**
   * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` (or `ERR_IDEM_INVALID_SECRET`) when the
   *   application starts, for invalid options or route options.
   */
  static forRoot<Request extends object = NestRequest>(options: NestIdempotencyOptions<Request>): DynamicModule {
    return idempotencyModule([], { provide: IDEMPOTENCY_OPTIONS, useValue: options })
  }

  static forRootAsync<Request extends object = NestRequest>(
    options: NestIdempotencyAsyncOptions<Request>,
  ): DynamicModule {
    return idempotencyModule(options.imports ?? [], {
      provide: IDEMPOTENCY_OPTIONS,
      useFactory: options.useFactory as FactoryProvider['useFactory'],
      inject: options.inject ?? [],
    })
  }
}

function idempotencyModule(imports: NonNullable<ModuleMetadata['imports']>, options: Provider): DynamicModule {
  return {
    module: IdempotencyModule,
    global: true,
    imports: [DiscoveryModule, ...imports],
    providers: [
      options,
      {
        provide: IdempotencyRegistry,
        useFactory: (input: IdempotencyOptions<NestRequest>, discovery: DiscoveryService) =>
          new IdempotencyRegistry(input, discovery),
        inject: [IDEMPOTENCY_OPTIONS, DiscoveryService],
      },
    ],
    exports: [IdempotencyRegistry],
  }
}
