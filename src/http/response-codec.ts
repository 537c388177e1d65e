/**
 * The stored form of an HTTP response: status, allowlisted headers and the body bytes exactly as
 * sent. Which headers are kept is an allowlist (SPEC §5): content-type, location and the
 * configured ones; never set-cookie or date, whatever is configured.
 */
import { isUtf8 } from 'node:buffer'
import type { Codec } from '../core/codec.js'
import { ErrorCode, IdempotencyError } from '../core/errors.js'

/** A response as the handler produced it. */
export interface CapturedResponse {
  readonly status: number
  readonly headers: Readonly<Record<string, string | string[]>>
  readonly body: Buffer
  /** The error the handler threw or passed on, when the response is an error response. */
  readonly error?: unknown
}

/** Headers always stored. */
export const DEFAULT_STORED_HEADERS: readonly string[] = ['content-type', 'location']

/** Headers never stored: per-response or per-user, they would be wrong on a replay. */
export const NEVER_STORED_HEADERS: readonly string[] = [
  'set-cookie',
  'date',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'content-length',
  'idempotent-replayed',
]

/** Codec id of the format below; bump it when the format changes. */
export const RESPONSE_CODEC_ID = 'http-1'

interface StoredShape {
  s: number
  h: Record<string, string | string[]>
  /** `u` for a UTF-8 body stored as text, `b` for base64. */
  e: 'u' | 'b'
  b: string
}

/**
 * The response codec: keeps the allowlisted headers and the body byte for byte.
 * @param storedHeaders lowercase header names to keep.
 * @param maxResponseBytes larger bodies are refused (the executor then records an unknown effect).
 */
export function responseCodec(storedHeaders: readonly string[], maxResponseBytes: number): Codec<CapturedResponse> {
  const keep = new Set(storedHeaders.filter((name) => !NEVER_STORED_HEADERS.includes(name)))
  return {
    id: RESPONSE_CODEC_ID,
    encode(response) {
      if (response.body.byteLength > maxResponseBytes) {
        throw new IdempotencyError(
          ErrorCode.RESPONSE_NOT_STORABLE,
          `The response body is ${response.body.byteLength} bytes, over maxResponseBytes (${maxResponseBytes}); it is sent but not stored.`,
        )
      }
      const headers: Record<string, string | string[]> = {}
      for (const [name, value] of Object.entries(response.headers)) {
        const lower = name.toLowerCase()
        if (keep.has(lower) && value !== undefined) headers[lower] = Array.isArray(value) ? [...value] : String(value)
      }
      const text = isUtf8(response.body)
      const shape: StoredShape = {
        s: response.status,
        h: headers,
        e: text ? 'u' : 'b',
        b: response.body.toString(text ? 'utf8' : 'base64'),
      }
      return JSON.stringify(shape)
    },
    decode(data) {
      const shape = JSON.parse(data) as StoredShape
      if (
        typeof shape !== 'object' ||
        shape === null ||
        !Number.isInteger(shape.s) ||
        typeof shape.h !== 'object' ||
        (shape.e !== 'u' && shape.e !== 'b') ||
        typeof shape.b !== 'string'
      ) {
        throw new TypeError('Not an http-1 stored response.')
      }
      return { status: shape.s, headers: shape.h, body: Buffer.from(shape.b, shape.e === 'u' ? 'utf8' : 'base64') }
    },
  }
}
