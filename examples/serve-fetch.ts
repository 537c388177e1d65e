/**
 * Serves a Web-standard handler, `(request: Request) => Response`, on the runtime it runs on:
 * `Bun.serve` under Bun, `Deno.serve` under Deno, @hono/node-server under Node (which turns
 * Node's requests into Fetch ones). The Web-standard example and the runtime tests listen
 * through it.
 */

/** A Web-standard handler. */
export type FetchHandler = (request: Request) => Response | Promise<Response>

/** A server listening through `serveFetch`. */
export interface FetchServer {
  /** The port it listens on (the one asked for, or the one the system chose for 0). */
  readonly port: number
  /** Which server: `bun`, `deno` or `node`. */
  readonly runtime: 'bun' | 'deno' | 'node'
  /** Stops listening and drops the open connections. */
  close(): Promise<void>
}

interface BunServer {
  readonly port: number
  stop(closeActiveConnections?: boolean): Promise<void> | void
}
interface BunGlobal {
  serve(options: { port: number; hostname: string; fetch: FetchHandler; idleTimeout?: number }): BunServer
}
interface DenoServer {
  readonly addr: { readonly port: number }
  readonly finished: Promise<void>
  shutdown(): Promise<void>
}
interface DenoGlobal {
  serve(
    options: { port: number; hostname: string; onListen?: (addr: { port: number }) => void },
    handler: FetchHandler,
  ): DenoServer
}

/** Listens on `hostname:port` (0: a free port) with `handler`. */
export async function serveFetch(handler: FetchHandler, port: number, hostname = '127.0.0.1'): Promise<FetchServer> {
  const { Bun, Deno } = globalThis as { Bun?: BunGlobal; Deno?: DenoGlobal }
  if (Bun !== undefined) {
    // idleTimeout 0: a handler may take longer than Bun's default 10 s before it answers.
    const server = Bun.serve({ port, hostname, fetch: handler, idleTimeout: 0 })
    return { port: server.port, runtime: 'bun', close: async () => void (await server.stop(true)) }
  }
  if (Deno !== undefined) {
    const server = Deno.serve({ port, hostname, onListen: () => {} }, handler)
    return { port: server.addr.port, runtime: 'deno', close: () => server.shutdown() }
  }
  const { createServer } = await import('node:http')
  const { getRequestListener } = await import('@hono/node-server')
  const server = createServer(getRequestListener(handler))
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, hostname, resolve)
  })
  const address = server.address()
  return {
    port: typeof address === 'object' && address !== null ? address.port : port,
    runtime: 'node',
    close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()))
      server.closeAllConnections()
      return closed
    },
  }
}
