/**
 * `idempotentFetch` (docs/across-services.md, "The client"): `fetch` with an `Idempotency-Key`
 * on every unsafe request (the one given, else a random UUID made once per call) and retries of
 * that very request, with the same key and the same body, while the answer says it may succeed
 * later: jittered exponential backoff or the server's `Retry-After`, all within one deadline.
 * Nothing but the platform's `fetch`, `AbortSignal` and `crypto.randomUUID()`.
 */
import { ErrorCode, IdempotencyError, integerOption, invalidOption } from '../core/errors.js'
import { backoffMs, needsProblemCode, verdict } from './retry-rules.js'

/** How an `idempotentFetch` retries; every member optional, defaults below. */
export interface IdempotentFetchOptions {
  /**
   * The most time one call may take, every attempt and pause together, in milliseconds. A
   * retry that could not start within it is not made: the last answer is returned, or, when
   * the last attempt had none, the call rejects with a `TimeoutError`.
   * @default 60000
   */
  readonly deadlineMs?: number
  /**
   * The most one attempt may wait for its answer's headers, in milliseconds; then it counts as
   * a network failure (the request may have landed: it is sent again with the same key).
   * `undefined`: what is left of the deadline.
   */
  readonly attemptTimeoutMs?: number
  /**
   * The most attempts of one call, the first included.
   * @default 10
   */
  readonly maxAttempts?: number
  /**
   * The backoff's first pause without a `Retry-After`, in milliseconds, doubling on each retry
   * up to `maxDelayMs`, half of it random.
   * @default 200
   */
  readonly initialDelayMs?: number
  /** @default 10000 */
  readonly maxDelayMs?: number
  /** @default 'Idempotency-Key' */
  readonly keyHeader?: string
  /**
   * A streamed body (a `ReadableStream`, an async iterable, a `Request`'s body) is read into
   * memory once so every retry can send it again, up to this many bytes; a larger one rejects
   * the call before anything is sent. 0 refuses streamed bodies.
   * @default 16777216 (16 MiB)
   */
  readonly maxBufferedBodyBytes?: number
  /** The `fetch` that sends each attempt. @default globalThis.fetch */
  readonly fetch?: typeof fetch
  /** Called before each pause (logs, metrics). Must not throw. */
  readonly onRetry?: (event: RetryEvent) => void
}

/** What `onRetry` is told before a pause. */
export interface RetryEvent {
  /** The attempt that is retried: 1 for the first send. */
  readonly attempt: number
  /** The pause before the next attempt, in milliseconds. */
  readonly delayMs: number
  readonly method: string
  readonly url: string
  /** The `Idempotency-Key` sent (the same on every attempt), `undefined` for safe methods. */
  readonly key: string | undefined
  /** The status answered, when there was an answer. */
  readonly status?: number
  /** The failure, when there was no answer (a network error or the attempt's timeout). */
  readonly error?: unknown
}

/** `fetch`'s `RequestInit`, plus the idempotency key to send (else the header's, else a new UUID). */
export interface IdempotentRequestInit extends RequestInit {
  /** The `Idempotency-Key` of this call, e.g. `request.idempotency.keyFor('charge')`. */
  readonly idempotencyKey?: string
}

/** A `fetch`-compatible function that retries (see `idempotentFetch`). */
export interface IdempotentFetch {
  (input: string | URL | Request, init?: IdempotentRequestInit): Promise<Response>
  /** An `idempotentFetch` with these options over this one's. */
  with(options: IdempotentFetchOptions): IdempotentFetch
}

/** What a request body may be: what `RequestInit.body` takes. */
type BodyInit = NonNullable<RequestInit['body']>

interface Settings {
  readonly deadlineMs: number
  readonly attemptTimeoutMs: number | undefined
  readonly maxAttempts: number
  readonly initialDelayMs: number
  readonly maxDelayMs: number
  readonly keyHeader: string
  readonly maxBufferedBodyBytes: number
  readonly fetch: typeof fetch | undefined
  readonly onRetry: ((event: RetryEvent) => void) | undefined
}

const DEFAULTS: Settings = {
  deadlineMs: 60_000,
  attemptTimeoutMs: undefined,
  maxAttempts: 10,
  initialDelayMs: 200,
  maxDelayMs: 10_000,
  keyHeader: 'Idempotency-Key',
  maxBufferedBodyBytes: 16 * 1024 * 1024,
  fetch: undefined,
  onRetry: undefined,
}

/** Methods that change nothing (RFC 9110 §9.2.1): sent without a key, retried by the same rules. */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE'])

/** The option names `with()` accepts. */
const OPTION_NAMES = new Set(Object.keys(DEFAULTS))

/** One call's request, ready to be sent again as it is. */
interface Prepared {
  readonly url: string
  readonly method: string
  readonly headers: Headers
  readonly body: BodyInit | undefined
  readonly init: RequestInit
  readonly signal: AbortSignal | undefined
  readonly key: string | undefined
}

function settingsOf(base: Settings, options: IdempotentFetchOptions): Settings {
  if (options === null || typeof options !== 'object') invalidOption('options', 'an object', options)
  for (const name of Object.keys(options)) {
    if (!OPTION_NAMES.has(name)) {
      invalidOption(name, `one of the known options (${[...OPTION_NAMES].join(', ')}) of idempotentFetch.with()`, name)
    }
  }
  const merged = { ...base }
  for (const [name, value] of Object.entries(options)) {
    if (value !== undefined) (merged as Record<string, unknown>)[name] = value
  }
  integerOption('deadlineMs', merged.deadlineMs, 1)
  if (merged.attemptTimeoutMs !== undefined) integerOption('attemptTimeoutMs', merged.attemptTimeoutMs, 1)
  integerOption('maxAttempts', merged.maxAttempts, 1)
  integerOption('initialDelayMs', merged.initialDelayMs, 0)
  integerOption('maxDelayMs', merged.maxDelayMs, 0)
  integerOption('maxBufferedBodyBytes', merged.maxBufferedBodyBytes, 0)
  if (typeof merged.keyHeader !== 'string' || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(merged.keyHeader)) {
    invalidOption('keyHeader', 'an HTTP header name', merged.keyHeader)
  }
  if (merged.fetch !== undefined && typeof merged.fetch !== 'function') {
    invalidOption('fetch', 'a fetch function', merged.fetch)
  }
  if (merged.onRetry !== undefined && typeof merged.onRetry !== 'function') {
    invalidOption('onRetry', 'a function', merged.onRetry)
  }
  return merged
}

function create(settings: Settings): IdempotentFetch {
  const call = (input: string | URL | Request, init?: IdempotentRequestInit) => send(settings, input, init)
  return Object.assign(call, {
    with: (options: IdempotentFetchOptions) => create(settingsOf(settings, options)),
  })
}

/**
 * `fetch` that makes an unsafe request safe to retry and retries it (docs/across-services.md):
 *
 * - a POST, PUT, PATCH or DELETE carries an `Idempotency-Key`: `init.idempotencyKey`, else the
 *   header given, else a random UUID made once for the call; every retry sends the same key;
 * - network errors and timeouts (the request may have landed) are retried, and so are 408,
 *   409 (in flight), 425, 429, 500, 502, 503 and 504, after the server's `Retry-After`
 *   (seconds or an HTTP-date) or a jittered exponential backoff; other answers, 400, 401, 422
 *   and idemkit's 503 `IDEMPOTENCY_RECOVERY_REQUIRED` among them, are returned as they are;
 * - an `x-should-retry: true|false` header on the answer wins over these rules;
 * - everything within `deadlineMs` (60 s); `init.signal` aborts the call, pauses included.
 *
 * `idempotentFetch.with({ deadlineMs, maxAttempts, ... })` makes one with other settings.
 */
export const idempotentFetch: IdempotentFetch = create(DEFAULTS)

async function send(
  settings: Settings,
  input: string | URL | Request,
  init?: IdempotentRequestInit,
): Promise<Response> {
  const started = performance.now()
  const deadline = started + settings.deadlineMs
  const request = await prepare(settings, input, init)
  const { signal } = request
  const fetchImpl = settings.fetch ?? globalThis.fetch
  for (let attempt = 1; ; attempt++) {
    signal?.throwIfAborted()
    const left = deadline - performance.now()
    const timeoutMs = Math.max(1, Math.floor(Math.min(left, settings.attemptTimeoutMs ?? left)))
    const timeout = AbortSignal.timeout(timeoutMs)
    let response: Response
    try {
      response = await fetchImpl(request.url, {
        ...request.init,
        method: request.method,
        headers: request.headers,
        body: request.body,
        signal: signal === undefined ? timeout : AbortSignal.any([signal, timeout]),
      })
    } catch (error) {
      if (signal?.aborted === true) throw signal.reason
      const delayMs = backoffMs(attempt, settings.initialDelayMs, settings.maxDelayMs, Math.random)
      if (attempt >= settings.maxAttempts || performance.now() + delayMs >= deadline) {
        if (timeout.aborted && performance.now() >= deadline - 1) throw deadlineError(settings, attempt, error)
        throw error
      }
      notify(settings, { attempt, delayMs, method: request.method, url: request.url, key: request.key, error })
      await pause(delayMs, signal)
      continue
    }
    const problemCode = needsProblemCode(response.status, response.headers) ? await codeOf(response) : undefined
    const judged = verdict(response.status, response.headers, problemCode, Date.now())
    if (!judged.retry || attempt >= settings.maxAttempts) return response
    const delayMs = judged.afterMs ?? backoffMs(attempt, settings.initialDelayMs, settings.maxDelayMs, Math.random)
    // A retry that could not be sent within the deadline is not worth the wait: this answer is the call's.
    if (performance.now() + delayMs >= deadline) return response
    await discard(response)
    notify(settings, {
      attempt,
      delayMs,
      method: request.method,
      url: request.url,
      key: request.key,
      status: response.status,
    })
    await pause(delayMs, signal)
  }
}

/** The request as every attempt sends it: method, headers with the key, and a body that can be sent again. */
async function prepare(
  settings: Settings,
  input: string | URL | Request,
  init: IdempotentRequestInit = {},
): Promise<Prepared> {
  const { idempotencyKey, body: initBody, headers: initHeaders, signal: initSignal, method: initMethod, ...rest } = init
  const source = input instanceof Request ? input : undefined
  const url = source === undefined ? String(input) : source.url
  const method = (initMethod ?? source?.method ?? 'GET').toUpperCase()
  const headers = new Headers(initHeaders ?? source?.headers)
  const signal = initSignal ?? source?.signal ?? undefined
  let body: BodyInit | undefined
  if (initBody !== undefined && initBody !== null) body = await replayable(settings, initBody)
  else if (source?.body != null) body = await replayable(settings, source.body)
  let key: string | undefined
  if (!SAFE_METHODS.has(method)) {
    if (idempotencyKey !== undefined) {
      if (typeof idempotencyKey !== 'string' || !/^[\x21-\x7e]{1,255}$/.test(idempotencyKey)) {
        throw new IdempotencyError(
          ErrorCode.INVALID_ARGUMENT,
          'idempotencyKey must be 1 to 255 visible ASCII characters (e.g. keyFor(name) or a UUID).',
        )
      }
      headers.set(settings.keyHeader, idempotencyKey)
    } else if (!headers.has(settings.keyHeader)) {
      headers.set(settings.keyHeader, globalThis.crypto.randomUUID())
    }
    key = headers.get(settings.keyHeader) ?? undefined
  }
  // A streamed body is bytes now: `duplex` was for the stream.
  const { duplex: _duplex, ...init2 } = rest as RequestInit & { duplex?: unknown }
  return { url, method, headers, body, init: init2, signal, key }
}

/** A body every attempt can send: as it is when fetch reads it afresh each time, else read into bytes once. */
async function replayable(settings: Settings, body: BodyInit): Promise<BodyInit> {
  if (
    typeof body === 'string' ||
    body instanceof ArrayBuffer ||
    ArrayBuffer.isView(body) ||
    body instanceof Blob ||
    body instanceof URLSearchParams ||
    body instanceof FormData
  ) {
    return body
  }
  const limit = settings.maxBufferedBodyBytes
  if (limit === 0) throw streamRefused('maxBufferedBodyBytes is 0')
  const chunks: Uint8Array[] = []
  let size = 0
  const source = body as AsyncIterable<unknown> | ReadableStream<unknown>
  const iterable: AsyncIterable<unknown> =
    Symbol.asyncIterator in source ? source : readAll(source as ReadableStream<unknown>)
  for await (const chunk of iterable) {
    const bytes = typeof chunk === 'string' ? new TextEncoder().encode(chunk) : toBytes(chunk)
    size += bytes.byteLength
    if (size > limit) throw streamRefused(`it is larger than maxBufferedBodyBytes (${limit} bytes)`)
    chunks.push(bytes)
  }
  const out = new Uint8Array(size)
  let at = 0
  for (const chunk of chunks) {
    out.set(chunk, at)
    at += chunk.byteLength
  }
  return out
}

async function* readAll(stream: ReadableStream<unknown>): AsyncGenerator<unknown> {
  const reader = stream.getReader()
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return
      yield value
    }
  } finally {
    reader.releaseLock()
  }
}

function toBytes(chunk: unknown): Uint8Array {
  if (chunk instanceof Uint8Array) return chunk
  if (ArrayBuffer.isView(chunk)) return new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength)
  if (chunk instanceof ArrayBuffer) return new Uint8Array(chunk)
  throw new IdempotencyError(ErrorCode.INVALID_ARGUMENT, 'A streamed body must yield bytes or strings.')
}

function streamRefused(why: string): IdempotencyError {
  return new IdempotencyError(
    ErrorCode.INVALID_ARGUMENT,
    `idempotentFetch sends the body again on every retry, so a streamed body is read into memory first; this one is refused: ${why}. Pass the body as a string, bytes or a Blob, or raise maxBufferedBodyBytes.`,
  )
}

/** The `code` of a problem+json answer, read from a copy so the caller still gets the body. */
async function codeOf(response: Response): Promise<string | undefined> {
  try {
    const problem = JSON.parse(await response.clone().text()) as { code?: unknown }
    return typeof problem?.code === 'string' ? problem.code : undefined
  } catch {
    return undefined
  }
}

/** Frees the connection of an answer that is not handed out. */
async function discard(response: Response): Promise<void> {
  try {
    await response.body?.cancel()
  } catch {
    // Already read or broken: nothing is held.
  }
}

function notify(settings: Settings, event: RetryEvent): void {
  try {
    settings.onRetry?.(event)
  } catch {
    // An observer never changes the call.
  }
}

/** Waits `ms`, or rejects with the signal's reason when it fires first. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted === true) {
      reject(signal.reason)
      return
    }
    const onAbort = () => {
      clearTimeout(timer)
      reject(signal?.reason)
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

function deadlineError(settings: Settings, attempts: number, cause: unknown): Error {
  const error = new DOMException(
    `No answer within idempotentFetch's deadline (deadlineMs ${settings.deadlineMs}) after ${attempts} attempt${attempts === 1 ? '' : 's'}; the request may have been processed: retry later with the same key.`,
    'TimeoutError',
  )
  Object.defineProperty(error, 'cause', { value: cause, configurable: true, writable: true })
  return error
}
