/**
 * Answers on a Node `ServerResponse`, for the adapters that write to one (Express, and NestJS on
 * either platform): the layer's own answers, and the hold on the handler's response until its
 * completion is written (docs/design.md §5: "the completion is written before the response
 * leaves"). While the handler runs, `writeHead`, `write`, `end` and `flushHeaders` of the
 * response are shadowed, so everything the framework writes through them — `res.json`,
 * `res.send`, `res.status`/`res.set` + `res.end`, `res.write` + `res.end`, a piped stream, the
 * error handler's answer — is buffered. Nothing reaches the socket until `send()`, which writes
 * either exactly the buffered bytes or a replacement.
 */
import { type ServerResponse, STATUS_CODES } from 'node:http'
import type { HttpResponse } from './problem.js'
import { type CapturedResponse, storedOf } from './response-codec.js'

/**
 * Ends `res` with the layer's own answer (a replayed response or a problem+json), without
 * running the handler; headers set earlier (by other middleware) stay.
 */
export function sendResponse(res: ServerResponse, response: HttpResponse): void {
  res.statusCode = response.status
  for (const [name, value] of Object.entries(response.headers)) res.setHeader(name, value)
  res.end(response.body)
}

export interface ResponseCapture {
  /**
   * Ends the response: the captured bytes unchanged, or `replacement` (status, headers and body).
   * A replacement keeps only the headers that were set before the capture began (by middleware
   * that ran before the handler, as on the layer's other answers): whatever the handler set
   * (Location, ETag, ...) belongs to the answer that is not sent.
   */
  send(replacement?: HttpResponse): void
}

type Method = (...args: unknown[]) => unknown
type Patched = 'writeHead' | 'write' | 'end' | 'flushHeaders' | 'destroy'
const PATCHED: readonly Patched[] = ['writeHead', 'write', 'end', 'flushHeaders', 'destroy']

/**
 * Starts capturing `res`.
 * @param storedHeaders the allowlisted header names: the only headers read and stored.
 * @param onEnd called once, when the handler ends the response; the response is then held until
 *   `send()` is called.
 * @param onDestroy called instead of `onEnd` when the response is destroyed before it was ended
 *   (a failing `pipeline(source, res)`, or `res.destroy()` in the handler): no answer will come.
 *   A client that leaves does not destroy `res` this way; its handler's answer is still captured.
 */
export function captureResponse(
  res: ServerResponse,
  storedHeaders: readonly string[],
  onEnd: (captured: CapturedResponse) => void,
  onDestroy: (error: unknown) => void,
): ResponseCapture {
  const target = res as unknown as Record<Patched, Method>
  const original = {} as Record<Patched, Method>
  for (const name of PATCHED) original[name] = target[name]
  const chunks: Buffer[] = []
  const endCallbacks: Method[] = []
  const before = new Set(res.getHeaderNames())
  let state: 'open' | 'ended' | 'released' = 'open'

  const patched: Record<Patched, Method> = {
    writeHead(...args) {
      if (state === 'released') return original.writeHead.apply(res, args)
      const [status, reason, headers] = args
      res.statusCode = status as number
      if (typeof reason === 'string') res.statusMessage = reason
      applyHeaders(res, typeof reason === 'string' ? headers : reason)
      return res
    },
    write(...args) {
      if (state === 'released') return original.write.apply(res, args)
      const [chunk, encoding, callback] = args
      const done = typeof encoding === 'function' ? encoding : callback
      if (state === 'open') chunks.push(toBuffer(chunk, encoding))
      if (typeof done === 'function') process.nextTick(done as Method)
      return true
    },
    end(...args) {
      if (state === 'released') return original.end.apply(res, args)
      // A second end while the completion is being written changes nothing, as after a real end.
      if (state === 'ended') return res
      let [chunk, encoding, callback] = args
      if (typeof chunk === 'function') [chunk, callback] = [undefined, chunk]
      else if (typeof encoding === 'function') [encoding, callback] = [undefined, encoding]
      if (chunk !== undefined && chunk !== null) chunks.push(toBuffer(chunk, encoding))
      if (typeof callback === 'function') endCallbacks.push(callback as Method)
      state = 'ended'
      onEnd({
        status: res.statusCode,
        headers: storedOf(storedHeaders, (name) => res.getHeader(name)),
        body: Buffer.concat(chunks),
      })
      return res
    },
    flushHeaders(...args) {
      // Headers sent early could not be replaced by a 503 any more: they wait with the body.
      if (state === 'released') return original.flushHeaders.apply(res, args)
      return undefined
    },
    destroy(...args) {
      if (state === 'open') {
        state = 'ended'
        release()
        onDestroy(args[0] ?? new Error('The response was destroyed before it was ended.'))
      }
      return original.destroy.apply(res, args)
    },
  }
  for (const name of PATCHED) target[name] = patched[name]

  function release(): void {
    if (state === 'released') return
    state = 'released'
    // Put back what was there, unless something wrapped ours since (it passes through to Node now).
    for (const name of PATCHED) if (target[name] === patched[name]) target[name] = original[name]
  }

  return {
    send(replacement) {
      const body = Buffer.concat(chunks)
      release()
      const callbacks = endCallbacks.splice(0)
      const done = () => {
        for (const callback of callbacks) callback()
      }
      if (replacement === undefined) {
        res.end(body, done)
        return
      }
      res.statusCode = replacement.status
      res.statusMessage = STATUS_CODES[replacement.status] ?? ''
      for (const name of res.getHeaderNames()) if (!before.has(name)) res.removeHeader(name)
      for (const [name, value] of Object.entries(replacement.headers)) res.setHeader(name, value)
      res.setHeader('content-length', Buffer.byteLength(replacement.body))
      res.end(replacement.body, done)
    },
  }
}

/** `writeHead`'s headers: an object, or Node's flat `[name, value, name, value, ...]` list. */
function applyHeaders(res: ServerResponse, headers: unknown): void {
  if (Array.isArray(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2) res.appendHeader(String(headers[i]), headers[i + 1] as string)
    return
  }
  if (headers === null || typeof headers !== 'object') return
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) res.setHeader(name, value as string | number | readonly string[])
  }
}

function toBuffer(chunk: unknown, encoding: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk
  if (typeof chunk === 'string')
    return Buffer.from(chunk, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8')
  if (chunk instanceof Uint8Array) return Buffer.from(chunk)
  return Buffer.from(String(chunk))
}
