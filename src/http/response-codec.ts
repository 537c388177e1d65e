/**
 * The stored form of an HTTP response: status, allowlisted headers and the body bytes exactly as
 * sent. Which headers are kept is an allowlist (docs/design.md §5): content-type, location and the
 * configured ones; never set-cookie or date, whatever is configured.
 *
 * Format `http-2`, bytes, read in one pass and never copied on a replay (the body is a view of
 * the stored bytes):
 *
 *     u16  status
 *     u8   number of header lines
 *     per line: u8 name length, name (ASCII), u16 value length, value (latin-1, as Node sends it)
 *     ...  the body: the rest of the bytes
 *
 * A header with several values is several lines of the same name. Records written by
 * version 1 of this library (`http-1`: JSON with the body as text or base64) are still read.
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
  'idempotency-status',
]

/** A header's value as a framework's getter gives it (`getHeader`, `Headers.get`); absent: `undefined` or `null`. */
export type HeaderValue = string | number | readonly string[] | null | undefined

/**
 * The allowlisted headers of a response, the only ones stored: the rest are never read.
 * @param names the route's stored header names (lowercase).
 * @param header the framework's getter: `(name) => reply.getHeader(name)`, `(name) => headers.get(name)`.
 */
export function storedOf(
  names: readonly string[],
  header: (name: string) => HeaderValue,
): Record<string, string | string[]> {
  const headers: Record<string, string | string[]> = {}
  for (const name of names) {
    const value = header(name)
    if (value === undefined || value === null) continue
    headers[name] = typeof value === 'object' ? value.map(String) : String(value)
  }
  return headers
}

/** Codec id of the format above; bump it when the format changes. */
export const RESPONSE_CODEC_ID = 'http-2'
/** The format of version 1 (JSON), still read. */
const LEGACY_CODEC_ID = 'http-1'

interface LegacyShape {
  s: number
  h: Record<string, string | string[]>
  /** `u` for a UTF-8 body stored as text, `b` for base64. */
  e: 'u' | 'b'
  b: string
}

function notStorable(message: string): IdempotencyError {
  return new IdempotencyError(ErrorCode.RESPONSE_NOT_STORABLE, message)
}

/**
 * The response codec: keeps the allowlisted headers and the body byte for byte.
 * @param storedHeaders lowercase header names to keep.
 * @param maxResponseBytes larger bodies are refused (the executor then records an unknown effect).
 */
export function responseCodec(storedHeaders: readonly string[], maxResponseBytes: number): Codec<CapturedResponse> {
  const keep = storedHeaders.filter((name) => !NEVER_STORED_HEADERS.includes(name))
  return {
    id: RESPONSE_CODEC_ID,
    reads: [LEGACY_CODEC_ID],
    encode(response) {
      const body = response.body
      if (body.byteLength > maxResponseBytes) {
        throw notStorable(
          `The response body is ${body.byteLength} bytes, over maxResponseBytes (${maxResponseBytes}); it is sent but not stored.`,
        )
      }
      const lines: [string, string][] = []
      let size = 3 + body.byteLength
      for (const name of keep) {
        const value = response.headers[name]
        if (value === undefined) continue
        for (const one of Array.isArray(value) ? value : [value]) {
          const text = String(one)
          if (text.length > 0xffff) throw notStorable(`The ${name} header is too long to store.`)
          lines.push([name, text])
          size += 3 + name.length + text.length
        }
      }
      if (lines.length > 0xff) throw notStorable('The response has too many stored header lines.')
      const out = Buffer.allocUnsafe(size)
      let at = out.writeUInt16BE(response.status, 0)
      at = out.writeUInt8(lines.length, at)
      for (const [name, value] of lines) {
        at = out.writeUInt8(name.length, at)
        at += out.write(name, at, 'latin1')
        at = out.writeUInt16BE(value.length, at)
        at += out.write(value, at, 'latin1')
      }
      body.copy(out, at)
      return out
    },
    decode(data, codecId) {
      if (codecId === LEGACY_CODEC_ID) return decodeLegacy(data)
      const status = data.readUInt16BE(0)
      const count = data.readUInt8(2)
      const headers: Record<string, string | string[]> = {}
      let at = 3
      for (let line = 0; line < count; line++) {
        const nameLength = data.readUInt8(at)
        const name = data.toString('latin1', at + 1, at + 1 + nameLength)
        at += 1 + nameLength
        const valueLength = data.readUInt16BE(at)
        const value = data.toString('latin1', at + 2, at + 2 + valueLength)
        at += 2 + valueLength
        const seen = headers[name]
        headers[name] = seen === undefined ? value : Array.isArray(seen) ? [...seen, value] : [seen, value]
      }
      if (at > data.byteLength) throw new TypeError('Not an http-2 stored response.')
      return { status, headers, body: data.subarray(at) }
    },
  }
}

function decodeLegacy(data: Buffer): CapturedResponse {
  const shape = JSON.parse(data.toString('utf8')) as LegacyShape
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
}

/** Encodes a response in the version-1 format (JSON): for tests of records written by version 1. */
export function encodeLegacyResponse(response: CapturedResponse): Buffer {
  const text = isUtf8(response.body)
  const shape: LegacyShape = {
    s: response.status,
    h: { ...response.headers } as Record<string, string | string[]>,
    e: text ? 'u' : 'b',
    b: response.body.toString(text ? 'utf8' : 'base64'),
  }
  return Buffer.from(JSON.stringify(shape), 'utf8')
}
