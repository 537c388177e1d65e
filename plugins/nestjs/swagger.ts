/**
 * The `idemkit/nestjs/swagger` entry, the only one that imports @nestjs/swagger (an optional
 * peer: an application without it imports `idemkit/nestjs` as before). `@ApiIdempotent()` puts
 * the contract of `@Idempotent()` routes in the document `SwaggerModule.createDocument()` builds
 * (docs/openapi.md), from the pieces the Fastify plugin documents its routes with: the
 * `Idempotency-Key` header parameter, the status and replay headers on the route's answers, and
 * the 400, 401, 409, 422 and 503 `application/problem+json` responses on one shared schema,
 * `IdempotencyProblem`. Routes without `@Idempotent()` are left as they are.
 */
import 'reflect-metadata'
import { RequestMethod } from '@nestjs/common'
import { HTTP_CODE_METADATA, METHOD_METADATA } from '@nestjs/common/constants.js'
import { ApiExtraModels, ApiHeader, ApiProperty, ApiSchema, DECORATORS, getSchemaPath } from '@nestjs/swagger'
import {
  ANSWER_DESCRIPTION,
  ANSWER_HEADERS,
  type DocumentedRoute,
  isSuccessStatus,
  KEY_HEADER_NAME,
  KEY_SCHEMA,
  keyHeaderDescription,
  PROBLEM_MEDIA_TYPE,
  PROBLEM_SCHEMA,
  problemHeaders,
  problemResponses,
  type SchemaObject,
} from '../../src/http/openapi.js'
import type { RouteOptions } from '../../src/http/route-options.js'
import { type NestRequest, ROUTE_METADATA } from './registry.js'

/** The problem details of the layer's refusals, as a model: its properties are PROBLEM_SCHEMA's. */
@ApiSchema({ name: 'IdempotencyProblem', description: PROBLEM_SCHEMA.description as string })
export class IdempotencyProblem {}

const problemRequired = new Set(PROBLEM_SCHEMA.required as string[])
for (const [name, schema] of Object.entries(PROBLEM_SCHEMA.properties as Record<string, SchemaObject>)) {
  ApiProperty({ ...schema, required: problemRequired.has(name) })(IdempotencyProblem.prototype, name)
}

/**
 * What the decorator cannot read from the route: the options the application gives
 * `IdempotencyModule.forRoot()` that change the contract.
 */
export interface ApiIdempotentOptions {
  /**
   * `required` of the module's options: the default of the routes that do not set their own.
   * @default true
   */
  readonly required?: boolean
  /**
   * `anonymous` of the module's options: with `true`, requests without a principal are not
   * refused, so no 401 is documented.
   * @default false
   */
  readonly anonymous?: boolean
}

/** An entry of @nestjs/swagger's response metadata (what `@ApiResponse()` keeps per status). */
type ResponseEntry = SchemaObject & { headers?: SchemaObject; content?: SchemaObject; description?: string }

/**
 * Documents `@Idempotent()` routes. On a controller class, every `@Idempotent()` method of it
 * (its other routes are left as they are), whatever the order of the methods' decorators; on a
 * method, that one, written above its `@Idempotent()`. A status the route declares itself
 * (`@ApiBadRequestResponse({ type })`) keeps its body beside the problem, as `application/json`.
 */
export function ApiIdempotent(options: ApiIdempotentOptions = {}): ClassDecorator & MethodDecorator {
  return (target: object, key?: string | symbol, descriptor?: PropertyDescriptor) => {
    if (descriptor === undefined) {
      for (const [name, method] of idempotentMethods((target as { prototype: object }).prototype)) {
        documentMethod(target, name, method, options)
      }
      return
    }
    if (Reflect.getMetadata(ROUTE_METADATA, descriptor.value) === undefined) {
      throw new TypeError(
        `@ApiIdempotent() on ${String(key)}: the method has no @Idempotent() yet. Write @ApiIdempotent() above ` +
          '@Idempotent(), or put it on the controller class.',
      )
    }
    documentMethod(target, key as string | symbol, descriptor, options)
  }
}

/** The `@Idempotent()` methods of a controller, inherited ones too (as Nest's router finds them). */
function* idempotentMethods(prototype: object): Generator<[string, PropertyDescriptor]> {
  for (let at = prototype; at !== null && at !== Object.prototype; at = Object.getPrototypeOf(at)) {
    for (const name of Object.getOwnPropertyNames(at)) {
      const descriptor = Object.getOwnPropertyDescriptor(at, name)
      if (typeof descriptor?.value === 'function' && Reflect.hasMetadata(ROUTE_METADATA, descriptor.value)) {
        yield [name, descriptor]
      }
    }
  }
}

/** The methods documented already: a method under a documented class is documented once. */
const documented = new WeakSet<object>()

function documentMethod(
  target: object,
  key: string | symbol,
  descriptor: PropertyDescriptor,
  options: ApiIdempotentOptions,
): void {
  const method = descriptor.value as object
  if (documented.has(method)) return
  documented.add(method)
  const annotation = Reflect.getMetadata(ROUTE_METADATA, method) as RouteOptions<NestRequest> | true
  const route: DocumentedRoute = {
    keyHeader: annotation === true || annotation.key === undefined,
    required: (annotation === true ? undefined : annotation.required) ?? options.required ?? true,
    anonymous: options.anonymous ?? false,
  }
  const models: Array<new () => unknown> = [IdempotencyProblem]
  const responses = documentedResponses(
    (Reflect.getMetadata(DECORATORS.API_RESPONSE, method) as Record<string, ResponseEntry> | undefined) ?? {},
    method,
    route,
    models,
  )
  Reflect.defineMetadata(DECORATORS.API_RESPONSE, responses, method)
  ApiExtraModels(...models)(target, key, descriptor)
  if (route.keyHeader && !hasKeyParameter(method)) {
    ApiHeader({
      name: KEY_HEADER_NAME,
      required: route.required,
      description: keyHeaderDescription(route.required),
      schema: KEY_SCHEMA,
    })(target, key, descriptor)
  }
}

function hasKeyParameter(method: object): boolean {
  const parameters = (Reflect.getMetadata(DECORATORS.API_PARAMETERS, method) ?? []) as Array<{ name?: unknown }>
  return parameters.some((parameter) => String(parameter.name).toLowerCase() === KEY_HEADER_NAME.toLowerCase())
}

/**
 * The route's responses: the answer headers on its 2xx ones (on the status Nest answers with
 * when it declares none, as @nestjs/swagger would document it), and each refusal.
 */
function documentedResponses(
  own: Readonly<Record<string, ResponseEntry>>,
  method: object,
  route: DocumentedRoute,
  models: Array<new () => unknown>,
): Record<string, ResponseEntry> {
  const responses: Record<string, ResponseEntry> = { ...own }
  const successes = Object.keys(own).filter(isSuccessStatus)
  for (const status of successes.length > 0 ? successes : [String(defaultStatus(method))]) {
    const entry = responses[status]
    responses[status] = {
      ...entry,
      description: entry?.description || ANSWER_DESCRIPTION,
      headers: { ...entry?.headers, ...ANSWER_HEADERS },
    }
  }
  const problem = { schema: { $ref: getSchemaPath(IdempotencyProblem) } }
  for (const refusal of problemResponses(route.anonymous)) {
    const entry = responses[refusal.status]
    responses[refusal.status] = {
      description: entry?.description ? `${entry.description} ${refusal.description}` : refusal.description,
      headers: { ...entry?.headers, ...problemHeaders(refusal) },
      content: { ...(entry === undefined ? {} : ownContent(entry, models)), [PROBLEM_MEDIA_TYPE]: problem },
    }
  }
  return responses
}

/**
 * The status @nestjs/swagger gives a route that declares no response: its `@HttpCode()`, 201 for
 * POST, 200 otherwise; `2XX` on a method decorated before its `@Post()`, whose method is not known yet.
 */
function defaultStatus(method: object): number | string {
  const code = Reflect.getMetadata(HTTP_CODE_METADATA, method) as number | undefined
  if (code !== undefined) return code
  const verb = Reflect.getMetadata(METHOD_METADATA, method) as RequestMethod | undefined
  if (verb === undefined) return '2XX'
  return verb === RequestMethod.POST ? 201 : 200
}

const BUILT_IN_TYPES: readonly unknown[] = [String, Number, Boolean, Object, Array, Date, BigInt]

/** The body a route declares for a status, as content: `application/json` unless it says its own. */
function ownContent(entry: ResponseEntry, models: Array<new () => unknown>): SchemaObject {
  if (entry.content !== undefined) return entry.content
  let schema = entry.schema as SchemaObject | undefined
  const type = entry.type
  if (schema === undefined && typeof type === 'function' && !BUILT_IN_TYPES.includes(type)) {
    models.push(type as new () => unknown)
    schema = { $ref: getSchemaPath(type as new () => unknown) }
  }
  if (schema === undefined) return {}
  return { 'application/json': { schema: entry.isArray === true ? { type: 'array', items: schema } : schema } }
}
