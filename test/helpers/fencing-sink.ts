/**
 * A side-effect sink that fences stale owners: per scope it accepts a write only when its
 * fencing token is at least the last token it accepted, and rejects (409) a lower one. It runs
 * as an HTTP server on 127.0.0.1 in the test process, outside the apps under test.
 */
import { createServer, type Server } from 'node:http'

export interface SinkWrite {
  readonly scope: string
  readonly token: number
  readonly pid: number
  readonly accepted: boolean
}

export interface FencingSink {
  readonly url: string
  readonly writes: SinkWrite[]
  close(): Promise<void>
}

export async function startFencingSink(): Promise<FencingSink> {
  const last = new Map<string, number>()
  const writes: SinkWrite[] = []
  const server: Server = createServer((request, response) => {
    let body = ''
    request.on('data', (chunk: Buffer) => {
      body += chunk.toString()
    })
    request.on('end', () => {
      const { scope, token, pid } = JSON.parse(body) as { scope: string; token: number; pid: number }
      const accepted = token >= (last.get(scope) ?? 0)
      if (accepted) last.set(scope, token)
      writes.push({ scope, token, pid, accepted })
      response.writeHead(accepted ? 200 : 409, { 'content-type': 'application/json' })
      response.end(JSON.stringify({ accepted, last: last.get(scope) }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()))
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return {
    url: `http://127.0.0.1:${port}/write`,
    writes,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
