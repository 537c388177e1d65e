/**
 * Request fingerprint (docs/design.md §2): SHA-256 over an injective encoding of method, concrete path,
 * query, content type and body. JSON bodies are canonicalised with RFC 8785 (JCS), so key order
 * and whitespace do not change the fingerprint; other bodies are hashed as bytes. The result
 * carries the algorithm version (`f1:<hex>`), so the algorithm can change without turning every
 * retry in flight into a mismatch (docs/design.md §5): stores accept legacy fingerprints too.
 */
import canonicalize from 'canonicalize'
import { sha256Hex } from './digest.js'
import { encodeFields } from './encoding.js'
import { ErrorCode, IdempotencyError } from './errors.js'

/** Version of the fingerprint algorithm below. */
export const FINGERPRINT_VERSION = 1

/** A request body: a parsed JSON value, raw bytes or text, or nothing. */
export type FingerprintBody = { readonly json: unknown } | { readonly bytes: Uint8Array | string } | undefined

export interface FingerprintInput {
  /** HTTP method; compared case-insensitively. */
  readonly method: string
  /** The concrete path with its parameters filled in, e.g. `/accounts/1/deposits`. */
  readonly path: string
  /** The raw query string without `?`; empty when there is none. */
  readonly query?: string
  /** The Content-Type header; only its media type counts, case-insensitively. */
  readonly contentType?: string
  readonly body?: FingerprintBody
}

/** The media type of a Content-Type value, lowercased, without parameters. */
export function mediaType(contentType: string | undefined): string {
  if (!contentType) return ''
  const semicolon = contentType.indexOf(';')
  return (semicolon === -1 ? contentType : contentType.slice(0, semicolon)).trim().toLowerCase()
}

/** True for `application/json` and every `+json` structured syntax suffix (RFC 6839). */
export function isJsonMediaType(type: string): boolean {
  return type === 'application/json' || type.endsWith('+json')
}

/**
 * Computes the fingerprint of one request.
 * @returns `f<version>:<64 hex>`.
 * @throws IdempotencyError `ERR_IDEM_INVALID_ARGUMENT` when a JSON body cannot be canonicalised.
 */
export function fingerprint(input: FingerprintInput): string {
  const body = input.body
  let bodyKind: string
  let bodyBytes: string | Uint8Array
  if (body === undefined) {
    bodyKind = 'none'
    bodyBytes = ''
  } else if ('json' in body) {
    bodyKind = 'json'
    bodyBytes = canonicalJson(body.json)
  } else {
    bodyKind = 'bytes'
    bodyBytes = body.bytes
  }
  const digest = sha256Hex(
    encodeFields([
      'idem-fp',
      String(FINGERPRINT_VERSION),
      input.method.toUpperCase(),
      input.path,
      input.query ?? '',
      mediaType(input.contentType),
      bodyKind,
      bodyBytes,
    ]),
  )
  return `f${FINGERPRINT_VERSION}:${digest}`
}

function canonicalJson(value: unknown): string {
  let text: string | undefined
  try {
    text = canonicalize(value)
  } catch (error) {
    throw new IdempotencyError(ErrorCode.INVALID_ARGUMENT, 'The JSON body cannot be canonicalised (RFC 8785).', {
      cause: error,
    })
  }
  return text ?? 'undefined'
}
