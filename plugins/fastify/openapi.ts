/**
 * The contract of protected routes in @fastify/swagger's document (docs/openapi.md), without
 * importing it: @fastify/swagger keeps every route's options object from its own onRoute hook and
 * reads `schema` from it when `app.swagger()` builds the document, after `ready()`. The plugin
 * gives each protected route's options a documented copy of its schema in `onReady`, once Fastify
 * has compiled the route's validators and serializers from the original: the documentation
 * changes no validation (a missing key is still the layer's 400 problem) and no serialization.
 * It works whichever of the two plugins is registered first.
 */
import type { FastifyInstance, RouteOptions as FastifyRouteOptions } from 'fastify'
import {
  ANSWER_DESCRIPTION,
  ANSWER_HEADERS,
  type DocumentedRoute,
  type HeaderObject,
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

/** The `$id` of the shared problem schema (`app.addSchema`), which each refusal refers to. */
export const PROBLEM_SCHEMA_ID = 'IdempotencyProblem'

/**
 * Adds the shared problem schema to the context the plugin is registered in (once), and documents
 * the routes handed to the returned function once the app is ready.
 */
export function documentRoutes(fastify: FastifyInstance): (route: FastifyRouteOptions, doc: DocumentedRoute) => void {
  if (fastify.getSchema(PROBLEM_SCHEMA_ID) === undefined) {
    fastify.addSchema({ $id: PROBLEM_SCHEMA_ID, title: PROBLEM_SCHEMA_ID, ...PROBLEM_SCHEMA })
  }
  const routes: Array<readonly [FastifyRouteOptions, DocumentedRoute]> = []
  fastify.addHook('onReady', function idempotencyOpenApi(done) {
    for (const [route, doc] of routes.splice(0)) {
      ;(route as { schema?: unknown }).schema = documentedSchema(route.schema as SchemaObject | undefined, doc)
    }
    done()
  })
  return (route, doc) => {
    routes.push([route, doc])
  }
}

/** A copy of a route's schema with the key header, the answer headers and the refusals. */
export function documentedSchema(schema: SchemaObject | undefined, doc: DocumentedRoute): SchemaObject {
  const documented: SchemaObject = { ...schema }
  if (doc.keyHeader) {
    const headers = withKeyHeader(schema?.headers, doc.required)
    if (headers !== undefined) documented.headers = headers
  }
  documented.response = withResponses(schema?.response, doc.anonymous)
  return documented
}

function isPlainObject(value: unknown): value is SchemaObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/**
 * The route's headers schema with `Idempotency-Key` among its properties; `undefined` (left as
 * it is) when it already names the header or is not a plain object schema (a `$ref`, a string).
 */
function withKeyHeader(headers: unknown, required: boolean): SchemaObject | undefined {
  if (headers !== undefined && (!isPlainObject(headers) || headers.$ref !== undefined)) return undefined
  const properties = isPlainObject(headers?.properties) ? headers.properties : {}
  if (Object.keys(properties).some((name) => name.toLowerCase() === 'idempotency-key')) return undefined
  const names = Array.isArray(headers?.required) ? (headers.required as string[]) : []
  return {
    type: 'object',
    ...headers,
    properties: { ...properties, [KEY_HEADER_NAME]: { ...KEY_SCHEMA, description: keyHeaderDescription(required) } },
    ...(required || names.length > 0 ? { required: required ? [...names, KEY_HEADER_NAME] : names } : {}),
  }
}

function withResponses(response: unknown, anonymous: boolean): SchemaObject {
  const responses: SchemaObject = isPlainObject(response) ? { ...response } : {}
  const successes = Object.keys(responses).filter(isSuccessStatus)
  for (const status of successes) {
    const entry = responses[status]
    if (!isPlainObject(entry)) continue
    responses[status] = {
      ...entry,
      headers: { ...(entry.headers as object | undefined), ...swaggerHeaders(ANSWER_HEADERS) },
    }
  }
  if (successes.length === 0) {
    responses['2XX'] = {
      description: ANSWER_DESCRIPTION,
      type: 'null',
      headers: swaggerHeaders(ANSWER_HEADERS),
    }
  }
  for (const problem of problemResponses(anonymous)) {
    const headers = swaggerHeaders(problemHeaders(problem))
    const media = { schema: { $ref: `${PROBLEM_SCHEMA_ID}#` } }
    responses[problem.status] = withProblem(responses[problem.status], problem.description, headers, media)
  }
  return responses
}

/** Response headers as @fastify/swagger takes them: each a schema with its description. */
function swaggerHeaders(headers: Readonly<Record<string, HeaderObject>>): SchemaObject {
  const out: SchemaObject = {}
  for (const [name, header] of Object.entries(headers))
    out[name] = { ...header.schema, description: header.description }
  return out
}

/**
 * The route's own response for a status with the problem media type beside what it declares
 * (its schema moves under `content['application/json']`), or the problem response alone.
 */
function withProblem(own: unknown, description: string, headers: SchemaObject, media: SchemaObject): SchemaObject {
  if (!isPlainObject(own)) return { description, headers, content: { [PROBLEM_MEDIA_TYPE]: media } }
  const { description: ownDescription, headers: ownHeaders, content, ...schema } = own
  const merged: SchemaObject = {
    description: typeof ownDescription === 'string' ? `${ownDescription} ${description}` : description,
    headers: { ...(ownHeaders as object | undefined), ...headers },
  }
  if (isPlainObject(content)) {
    merged.content = { ...content, [PROBLEM_MEDIA_TYPE]: content[PROBLEM_MEDIA_TYPE] ?? media }
  } else {
    merged.content = { 'application/json': { schema }, [PROBLEM_MEDIA_TYPE]: media }
  }
  return merged
}
