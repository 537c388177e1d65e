// The HTTP server the ORM consumers share: node:http in front of an idemkit/fetch handler, so
// each project installs nothing but idemkit, its ORM and pg. Prints `listening <port>`.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'

/** Serves `handler` on a free port of 127.0.0.1. */
export async function serve(handler: (request: Request) => Promise<Response>): Promise<void> {
  const server = createServer(async (req, res) => {
    try {
      const chunks: Buffer[] = []
      for await (const chunk of req) chunks.push(chunk as Buffer)
      const headers = new Headers()
      for (const [name, value] of Object.entries(req.headers)) {
        if (typeof value === 'string') headers.set(name, value)
      }
      const request = new Request(`http://127.0.0.1${req.url ?? '/'}`, {
        method: req.method ?? 'GET',
        headers,
        ...(chunks.length > 0 ? { body: Buffer.concat(chunks).toString('utf8') } : {}),
      })
      const response = await handler(request)
      response.headers.forEach((value, name) => {
        res.setHeader(name, value)
      })
      res.writeHead(response.status)
      res.end(Buffer.from(await response.arrayBuffer()))
    } catch (error) {
      console.error(error)
      res.writeHead(500).end()
    }
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  console.log(`listening ${(server.address() as AddressInfo).port}`)
}

/** The order of the request: its key and item, as the client sent them. */
export async function orderOf(request: Request): Promise<{ key: string; item: string }> {
  const { item } = (await request.json()) as { item: string }
  return { key: request.headers.get('idempotency-key') ?? '', item }
}

/** The answer once the order is written: 201, unless the key's rows are not exactly one. */
export function answer(item: string, count: number): Response {
  if (count !== 1) throw new Error(`${count} orders for one key in the transaction`)
  return Response.json({ item, orders: count }, { status: 201 })
}

export const SECRETS = { current: 1, keys: { 1: 'consumer-secret-'.repeat(2) } }
