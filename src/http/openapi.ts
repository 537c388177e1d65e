/**
 * The layer's HTTP contract as OpenAPI 3 pieces (docs/openapi.md): the
 * `Idempotency-Key` header parameter, the headers of the handler's answers, the problem schema
 * and the refusals a protected route may answer. Plain objects only: the Fastify plugin and the
 * NestJS decorator give them to @fastify/swagger and @nestjs/swagger, which stay optional peers.
 */
import { MAX_KEY_LENGTH } from './key-header.js'
import { ProblemCode, STATUS_EXECUTED, STATUS_REPLAYED } from './problem.js'

/** The response headers as documented (their wire names are lowercase). */
export const STATUS_HEADER_NAME = 'Idempotency-Status'
export const REPLAYED_HEADER_NAME = 'Idempotent-Replayed'
export const SHOULD_RETRY_HEADER_NAME = 'x-should-retry'
export const KEY_HEADER_NAME = 'Idempotency-Key'

/** A bare key as a client should send it: visible ASCII but `"` and `,` (docs/design.md §5). */
export const KEY_PATTERN = '^[\\x21\\x23-\\x2B\\x2D-\\x7E]+$'

/** The media type of every refusal of the layer. */
export const PROBLEM_MEDIA_TYPE = 'application/problem+json'

/** A JSON Schema / OpenAPI 3 schema object, as plain data. */
export type SchemaObject = Record<string, unknown>

/** One response header: its description and schema. */
export interface HeaderObject {
  readonly description: string
  readonly schema: SchemaObject
}

/** The schema of the `Idempotency-Key` header's value. */
export const KEY_SCHEMA: SchemaObject = {
  type: 'string',
  minLength: 1,
  maxLength: MAX_KEY_LENGTH,
  pattern: KEY_PATTERN,
}

/** What the `Idempotency-Key` parameter says, by whether the route requires it. */
export function keyHeaderDescription(required: boolean): string {
  return (
    'A unique key per operation (a UUID): a retry with the same key and the same request gets the first ' +
    `answer again instead of running twice. 1 to ${MAX_KEY_LENGTH} visible ASCII characters; the quoted ` +
    `form ("key") is accepted too.${required ? '' : ' Without it the request is not protected.'}`
  )
}

/** What a route documents: whether its key is the header (and required), and whether 401 applies. */
export interface DocumentedRoute {
  readonly keyHeader: boolean
  readonly required: boolean
  readonly anonymous: boolean
}

/** The description of a protected route's answer where the route documents none of its own. */
export const ANSWER_DESCRIPTION =
  "The handler's answer: executed on the first request, replayed to a retry with the same key."

/** Whether a response key is a 2xx status (`201`, `2xx`, `2XX`). */
export function isSuccessStatus(status: string): boolean {
  return /^2(\d\d|xx)$/i.test(status)
}

/** The headers on the handler's answers of a protected route (first and replayed). */
export const ANSWER_HEADERS: Readonly<Record<string, HeaderObject>> = {
  [STATUS_HEADER_NAME]: {
    description: `\`${STATUS_EXECUTED}\` on the handler's own answer, \`${STATUS_REPLAYED}\` on a stored one sent again.`,
    schema: { type: 'string', enum: [STATUS_EXECUTED, STATUS_REPLAYED] },
  },
  [REPLAYED_HEADER_NAME]: {
    description: '`true` on a stored answer sent again; absent on a first answer.',
    schema: { type: 'string', enum: ['true'] },
  },
}

/** The problem details the layer answers its refusals with (RFC 9457). */
export const PROBLEM_SCHEMA: SchemaObject = {
  type: 'object',
  description: 'A refusal of the idempotency layer (RFC 9457 problem details).',
  required: ['type', 'title', 'status', 'detail', 'code', 'retryable'],
  properties: {
    type: { type: 'string', description: 'urn:idemkit:problem:<slug>, one per code.' },
    title: { type: 'string' },
    status: { type: 'integer' },
    detail: { type: 'string', description: 'What happened and what to do.' },
    code: { type: 'string', enum: Object.values(ProblemCode) },
    retryable: {
      type: 'boolean',
      description: 'Whether the same request with the same key may get another answer (also x-should-retry).',
    },
  },
}

/** One status a protected route may refuse with, and the codes behind it. */
export interface ProblemResponse {
  readonly status: 400 | 401 | 409 | 422 | 503
  readonly description: string
  readonly codes: readonly ProblemCode[]
  /** Whether it carries `Retry-After` (some of its answers do). */
  readonly retryAfter: boolean
}

const PROBLEMS: readonly ProblemResponse[] = [
  {
    status: 400,
    description: 'The idempotency key is missing or malformed, or the body cannot be fingerprinted.',
    codes: [ProblemCode.KEY_MISSING, ProblemCode.KEY_INVALID, ProblemCode.BODY_INVALID],
    retryAfter: false,
  },
  {
    status: 401,
    description: 'No principal owns the key: authenticate.',
    codes: [ProblemCode.PRINCIPAL_REQUIRED],
    retryAfter: false,
  },
  {
    status: 409,
    description: 'A request with this key is still being processed: retry after Retry-After.',
    codes: [ProblemCode.IN_FLIGHT],
    retryAfter: true,
  },
  {
    status: 422,
    description: 'This key was used with a different request: send a new key.',
    codes: [ProblemCode.KEY_REUSED],
    retryAfter: false,
  },
  {
    status: 503,
    description:
      'The store could not be reached or the answer not recorded (retryable, Retry-After), or an earlier ' +
      'request with this key ended with an unknown outcome (recovery required, not retryable).',
    codes: [ProblemCode.STORE_UNAVAILABLE, ProblemCode.RECOVERY_REQUIRED],
    retryAfter: true,
  },
]

/**
 * The refusals of a protected route: all of them, but 401 when the layer lets requests without a
 * principal through (`anonymous: true`).
 */
export function problemResponses(anonymous = false): readonly ProblemResponse[] {
  return anonymous ? PROBLEMS.filter((problem) => problem.status !== 401) : PROBLEMS
}

/** The headers of a refusal. */
export function problemHeaders(problem: ProblemResponse): Record<string, HeaderObject> {
  const headers: Record<string, HeaderObject> = {
    [STATUS_HEADER_NAME]: {
      description: "The refusal's slug (key-missing, in-flight, key-reused, ...).",
      schema: { type: 'string' },
    },
    [SHOULD_RETRY_HEADER_NAME]: {
      description: 'Whether a retry with the same key may get another answer.',
      schema: { type: 'string', enum: ['true', 'false'] },
    },
  }
  if (problem.retryAfter) {
    headers['Retry-After'] = {
      description: 'Seconds to wait before the retry (on the retryable answers).',
      schema: { type: 'integer', minimum: 1 },
    }
  }
  return headers
}
