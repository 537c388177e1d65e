/**
 * HTTP/1.1 over a raw TCP socket, for requests no HTTP client would send: control bytes,
 * CRLF inside a header value, repeated header lines, non-ASCII bytes. One request per
 * connection (`Connection: close`); the answer is read until the server closes.
 */
import { connect } from 'node:net'

export interface RawAnswer {
  /** The status code, or 0 when the server closed without a status line. */
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

/**
 * Sends `request` (the whole request, bytes as they go on the wire) to 127.0.0.1:`port`.
 * With `headFirst`, the head goes first and the body only if no answer came within 100 ms, as
 * a client sending `Expect: 100-continue` would: a server that refuses a body too large closes
 * the connection with the body unread, and the RST that follows can wipe its answer from the
 * client's receive buffer before it is read.
 */
export function rawRequest(port: number, request: Buffer, timeoutMs = 10_000, headFirst = false): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1' })
    const chunks: Buffer[] = []
    let done = false
    const finish = () => {
      if (done) return
      done = true
      clearTimeout(timer)
      socket.destroy()
      resolve(parse(Buffer.concat(chunks)))
    }
    const timer = setTimeout(finish, timeoutMs)
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('end', finish)
    socket.on('close', finish)
    socket.on('error', finish)
    socket.on('connect', () => {
      if (!headFirst) {
        socket.write(request)
        return
      }
      const split = request.indexOf('\r\n\r\n') + 4
      socket.write(request.subarray(0, split))
      setTimeout(() => {
        if (chunks.length === 0 && !done) socket.write(request.subarray(split))
      }, 100)
    })
  })
}

function parse(raw: Buffer): RawAnswer {
  const text = raw.toString('latin1')
  const end = text.indexOf('\r\n\r\n')
  const head = end === -1 ? text : text.slice(0, end)
  const [statusLine = '', ...lines] = head.split('\r\n')
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0)
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(':')
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
  }
  return {
    status,
    headers,
    body: end === -1 ? '' : raw.subarray(Buffer.byteLength(text.slice(0, end + 4), 'latin1')).toString('utf8'),
  }
}

/** Builds a request from a start line, raw header lines (each sent as given) and a body. */
export function buildRequest(startLine: string, headerLines: readonly Buffer[], body: Buffer): Buffer {
  const parts: Buffer[] = [Buffer.from(`${startLine}\r\n`, 'latin1')]
  for (const line of headerLines) parts.push(line, Buffer.from('\r\n', 'latin1'))
  parts.push(Buffer.from(`Content-Length: ${body.length}\r\nConnection: close\r\n\r\n`, 'latin1'), body)
  return Buffer.concat(parts)
}
