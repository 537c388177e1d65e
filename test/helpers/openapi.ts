/**
 * What the OpenAPI tests of both frameworks read of a document (test/fastify/openapi.test.ts,
 * test/nestjs/openapi.test.ts): its shape, the key parameter of an operation, and the validator.
 */
import { validate } from '@readme/openapi-parser'
import { expect } from 'vitest'

export type Operation = {
  parameters?: Array<{ in: string; name: string; required?: boolean; schema?: Record<string, unknown> }>
  responses: Record<string, OpenApiResponse>
}
export type OpenApiResponse = {
  description?: string
  headers?: Record<string, { schema: Record<string, unknown> }>
  content?: Record<string, { schema: Record<string, unknown> }>
}
export type Doc = {
  paths: Record<string, Record<string, Operation>>
  components: {
    schemas: Record<string, { title?: string; properties?: Record<string, unknown>; required?: string[] }>
  }
}

/** The statuses of the layer's refusals on a protected route. */
export const PROBLEM_STATUSES = ['400', '401', '409', '422', '503']

/** The members of the problem schema, in order. */
export const PROBLEM_PROPERTIES = ['type', 'title', 'status', 'detail', 'code', 'retryable']

/** The schema of the Idempotency-Key parameter. */
export const KEY_SCHEMA = { type: 'string', minLength: 1, maxLength: 255, pattern: '^[\\x21\\x23-\\x2B\\x2D-\\x7E]+$' }

/** Passes an OpenAPI 3 validator (@readme/openapi-parser), or the test fails with its errors. */
export async function validated(doc: object): Promise<void> {
  const result = await validate(structuredClone(doc) as never)
  expect(result.valid ? [] : result.errors).toEqual([])
  expect(result.valid).toBe(true)
}

export function keyParameter(operation: Operation | undefined) {
  return operation?.parameters?.find((parameter) => parameter.name.toLowerCase() === 'idempotency-key')
}
