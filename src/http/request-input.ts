/**
 * Translates a Node HTTP request, as an adapter sees it after body parsing, into the guard's
 * input: one place for the path/query split, the key header lines and the body's fingerprint
 * form, shared by the Fastify plugin and the Express middleware.
 */
import type { IncomingHttpHeaders } from 'node:http'
import { type FingerprintBody, isJsonMediaType, mediaType } from '../core/fingerprint.js'
import type { GuardInput } from './guard.js'
import { countKeyHeaderLines } from './key-header.js'

/** The parts of a request every adapter can give. */
export interface RequestParts {
  readonly method: string
  /** The request target as received: the full path (with any mount prefix) and the query. */
  readonly url: string
  readonly headers: IncomingHttpHeaders
  /** Node's `rawHeaders` (name, value, name, value, ...), to see a header sent on two lines. */
  readonly rawHeaders: readonly string[]
  /** The body as the framework's parser left it; `undefined` when there is none. */
  readonly body: unknown
}

/** Builds the guard's input from the request's parts. */
export function guardInput(request: RequestParts): GuardInput {
  const { url, headers } = request
  const question = url.indexOf('?')
  return {
    method: request.method,
    path: question === -1 ? url : url.slice(0, question),
    query: question === -1 ? '' : url.slice(question + 1),
    contentType: headers['content-type'],
    body: fingerprintBody(request.body, headers['content-type']),
    keyHeader: headers['idempotency-key'],
    keyHeaderLines: countKeyHeaderLines(request.rawHeaders),
  }
}

/**
 * The parsed body in the form the fingerprint hashes: a parsed JSON value as JSON (canonical,
 * RFC 8785), raw text or bytes as bytes.
 */
export function fingerprintBody(body: unknown, contentType: string | undefined): FingerprintBody {
  if (body === undefined) return undefined
  if (typeof body === 'string' || Buffer.isBuffer(body)) {
    // A JSON string body (`"x"`) arrives parsed as a string: keep JSON semantics for JSON types.
    return isJsonMediaType(mediaType(contentType)) && typeof body === 'string' ? { json: body } : { bytes: body }
  }
  return { json: body }
}
