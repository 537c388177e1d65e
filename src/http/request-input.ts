/**
 * Translates a Node HTTP request, as an adapter sees it after body parsing, into the guard's
 * input: one place for the path/query split, the key header lines and the request's default
 * fingerprint, shared by the Fastify plugin and the Express middleware.
 *
 * The fingerprint is computed here, when the input is made, so an adapter makes the input at the
 * moment the body is as the client sent it: right after parsing, before schema validation or a
 * validator can remove, coerce or default members of it (issue 10). docs/design.md §2 normalises only key
 * order and whitespace; a request with another body is another request.
 */
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http'
import { ErrorCode, IdempotencyError } from '../core/errors.js'
import { type FingerprintBody, fingerprint, isJsonMediaType, mediaType } from '../core/fingerprint.js'
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

/**
 * Builds the guard's input from the request's parts, with the default fingerprint of the body as
 * it is now. The fingerprint is only computed when the request carries an Idempotency-Key or the
 * route takes its key from a `key` function (without either the guard never needs it).
 * @param keyed whether the route has a `key` function (`route.key !== undefined`).
 */
export function guardInput(request: RequestParts, keyed = false): GuardInput {
  const { url, headers } = request
  const question = url.indexOf('?')
  const path = question === -1 ? url : url.slice(0, question)
  const query = question === -1 ? '' : url.slice(question + 1)
  const contentType = headers['content-type']
  const keyHeader = headers['idempotency-key']
  return {
    method: request.method,
    path,
    query,
    contentType,
    keyHeader,
    keyHeaderLines: countKeyHeaderLines(request.rawHeaders),
    fingerprint:
      keyHeader === undefined && !keyed
        ? null
        : defaultFingerprint(request.method, path, query, contentType, fingerprintBody(request.body, contentType)),
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

/**
 * The request's fingerprint, or `null` when its JSON body cannot be canonicalised (RFC 8785
 * rejects lone surrogates): bad input from the client, answered 400, never a 500.
 */
function defaultFingerprint(
  method: string,
  path: string,
  query: string,
  contentType: string | undefined,
  body: FingerprintBody,
): string | null {
  try {
    return fingerprint({ method, path, query, contentType, body })
  } catch (error) {
    if (error instanceof IdempotencyError && error.code === ErrorCode.INVALID_ARGUMENT) return null
    throw error
  }
}

/** True when the request carries a body (RFC 9112 §6.3), even if no parser read it. */
export function hasBody(req: IncomingMessage): boolean {
  if (req.headers['transfer-encoding'] !== undefined) return true
  const length = Number(req.headers['content-length'])
  return Number.isFinite(length) && length > 0
}
