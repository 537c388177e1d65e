/**
 * Requests and responses of the Fetch standard, for the adapters that speak them (the Hono
 * middleware and `idemkit/fetch`), as node-response.ts is for the adapters that write to a Node
 * `ServerResponse`: the guard's input from a `Request` whose body is read once and fingerprinted
 * from its bytes, and a handler's `Response` recorded before it leaves (docs/design.md §5: read to
 * the end, stored, then sent on as the same bytes, or replaced when it could not be stored).
 */
import type { IncomingHttpHeaders } from 'node:http'
import { isJsonMediaType, mediaType } from '../core/fingerprint.js'
import type { GuardInput, GuardRun } from './guard.js'
import { type HttpResponse, STATUS_EXECUTED, STATUS_HEADER } from './problem.js'
import { guardInput, type RequestParts } from './request-input.js'
import { storedOf } from './response-codec.js'

/** Statuses whose responses carry no body (Fetch: a null body status). */
const NULL_BODY_STATUSES: ReadonlySet<number> = new Set([101, 204, 205, 304])

/** Methods a handler or a middleware mounted on several routes lets through: reads need no key (RFC 9110 §9.2.1). */
export const SAFE_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE'])

/** How the guard's input reads the request. */
export interface WebInputSource {
  /**
   * Reads the body's bytes, without taking them from the handler (Hono's cached
   * `c.req.arrayBuffer()`, or a clone of the request); `undefined` when the route fingerprints
   * with a function of its own and the body is not read at all.
   */
  readonly body: (() => Promise<ArrayBuffer>) | undefined
  /**
   * The Node request behind the Fetch one, when the server gives it (@hono/node-server's
   * `incoming`): the request target as received and the raw header lines, so a key sent on two
   * lines is refused as such and the fingerprint is the one the Node adapters compute.
   */
  readonly node?: unknown
  /** Whether the route has a `key` function: the body is then read whether or not the header came. */
  readonly keyed?: boolean
}

/**
 * The guard's input for a Fetch request. The body is read only when the request carries a key,
 * or the route has a `key` function (and `source.body` is given): a JSON body (`application/json`, `+json`) is fingerprinted as its
 * value (RFC 8785, as on the other adapters), any other as its bytes; a JSON body that does not
 * parse has no fingerprint, which the guard answers 400 body-invalid, holding no key.
 */
export async function webGuardInput(request: Request, source: WebInputSource): Promise<GuardInput> {
  const incoming = source.node as Partial<RequestParts> | undefined
  const node = typeof incoming?.url === 'string' && Array.isArray(incoming.rawHeaders) ? incoming : undefined
  const headers: IncomingHttpHeaders = node?.headers ?? Object.fromEntries(request.headers)
  const parts = {
    method: request.method,
    url: node?.url ?? targetOf(request.url),
    headers,
    rawHeaders: node?.rawHeaders ?? [...request.headers].flat(),
    body: undefined as unknown,
  }
  const keyed = source.keyed === true
  if ((headers['idempotency-key'] === undefined && !keyed) || source.body === undefined) {
    return guardInput(parts, keyed)
  }
  const bytes = Buffer.from(await source.body())
  if (bytes.byteLength === 0) return guardInput(parts, keyed)
  if (!isJsonMediaType(mediaType(headers['content-type']))) return guardInput({ ...parts, body: bytes }, keyed)
  try {
    return guardInput({ ...parts, body: JSON.parse(bytes.toString('utf8')) }, keyed)
  } catch {
    // Not JSON: it cannot be canonicalised, so the guard answers 400 body-invalid, holding no key.
    return { ...guardInput(parts, keyed), fingerprint: null }
  }
}

/** The request target (path and query) of an absolute URL. */
export function targetOf(href: string): string {
  const url = new URL(href)
  return `${url.pathname}${url.search}`
}

/**
 * Records a handler's Response and gives the one to send: its body is read to the end (a stream
 * included), the completion written, then the same status, headers and bytes go out, or the
 * guard's replacement (503 processed-but-not-recorded) with only the headers in `before`. A body
 * that fails while it is read ends the run as an unknown effect, and the read's error is thrown.
 * @param storedHeaders the route's allowlisted header names: the only headers read for the record.
 * @param error the error the framework answered with this response (Hono's `c.error`), for the classifier.
 * @param before headers set before the handler ran, which a replacement keeps.
 */
export async function recordResponse(
  run: GuardRun,
  response: Response,
  storedHeaders: readonly string[],
  error?: unknown,
  before?: Headers,
): Promise<Response> {
  let body: Buffer
  try {
    body = Buffer.from(await response.arrayBuffer())
  } catch (failure) {
    // The body stream failed while it was read: what the client would get is unknown.
    await run.finish({ ok: false, error: failure })
    throw failure
  }
  const replacement = await run.finish({
    ok: true,
    value: {
      status: response.status,
      headers: storedOf(storedHeaders, (name) => response.headers.get(name)),
      body,
      error,
    },
  })
  if (replacement !== undefined) return webResponse(replacement, before)
  const sent = new Response(NULL_BODY_STATUSES.has(response.status) ? null : body, response)
  sent.headers.set(STATUS_HEADER, STATUS_EXECUTED)
  return sent
}

/**
 * A Fetch Response of one of the layer's answers (a replay, a problem, a replacement): its
 * status, headers and body, over the headers in `base` (set before the layer answered).
 */
export function webResponse(response: HttpResponse, base?: Headers): Response {
  const headers = new Headers(base)
  for (const [name, value] of Object.entries(response.headers)) {
    headers.delete(name)
    for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one)
  }
  const body = NULL_BODY_STATUSES.has(response.status) ? null : response.body
  return new Response(body, { status: response.status, headers })
}
