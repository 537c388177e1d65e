/**
 * `idemkit/fetch` under Bun and Deno as an `Adapter` of the HTTP table: the apps run in a child
 * process of that runtime (test/runtimes/fetch-server.ts, started once per runtime and stopped by
 * PID), and the table drives them from vitest over real HTTP. A custom route's reply function
 * runs here, called back by the child for every execution, and the child posts an app's log lines
 * here before the response they belong to, so a test reads both as it would in process.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage, type Server } from 'node:http'
import { join } from 'node:path'
import type { IdempotencyStore } from '../../src/core/store.js'
import type { Adapter, RunningApp, TestRoute } from './adapters.js'
import { storeSpec } from './stores.js'

/** The runtimes `idemkit/fetch` runs its table on besides Node. */
export type Runtime = 'bun' | 'deno'

/** An adapter whose apps live in a child process, with the child's own end. */
export interface RuntimeAdapter extends Adapter {
  /** Stops the runtime's process (by PID) and the callback server. */
  stop(): Promise<void>
}

const ROOT = join(import.meta.dirname, '../..')
const SERVER = 'test/runtimes/fetch-server.ts'
/** How long a runtime may take to start and compile the server (Deno type-strips the graph first). */
const START_TIMEOUT_MS = 120_000

/** How each runtime runs a TypeScript file of this repository, from the npm packages' binaries. */
function command(runtime: Runtime): { file: string; args: string[] } {
  // Both load the packages from node_modules, and are told never to download one.
  if (runtime === 'bun') return { file: join(ROOT, 'node_modules/.bin/bun'), args: ['--no-install', SERVER] }
  // --sloppy-imports: the sources import `./x.js` for `./x.ts`, as TypeScript's NodeNext asks.
  return {
    file: join(ROOT, 'node_modules/.bin/deno'),
    args: ['run', '--allow-all', '--sloppy-imports', '--cached-only', SERVER],
  }
}

async function bodyOf(request: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = []
  for await (const chunk of request) chunks.push(chunk as Buffer)
  return JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

interface Child {
  readonly process: ChildProcess
  readonly control: string
  readonly callback: Server
}

/** Stops a runtime's process by its PID and waits for it to exit. */
async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  process.kill(child.pid, 'SIGTERM')
  await exited
}

export function runtimeAdapter(runtime: Runtime): RuntimeAdapter {
  const routes = new Map<number, readonly TestRoute[]>()
  const logs = new Map<number, string[]>()
  let started: Promise<Child> | undefined

  /** The callback server: custom routes' replies and the apps' log lines. */
  async function callbackServer(): Promise<Server> {
    const server = createServer((request, response) => {
      const reply = /^\/reply\/(\d+)\/(\d+)$/.exec(request.url ?? '')
      const logged = /^\/logs\/(\d+)$/.exec(request.url ?? '')
      bodyOf(request).then(
        (body) => {
          if (reply !== null) {
            const route = routes.get(Number(reply[1]))?.[Number(reply[2])]
            const answer = route?.reply(body as Parameters<TestRoute['reply']>[0])
            if (answer === undefined) throw new Error(`no route ${request.url}`)
            response.setHeader('content-type', 'application/json')
            response.end(
              JSON.stringify({
                status: answer.status,
                headers: answer.headers,
                chunks: answer.chunks.map((chunk) => Buffer.from(chunk).toString('base64')),
              }),
            )
            return
          }
          if (logged !== null) logs.get(Number(logged[1]))?.push(...(body as string[]))
          response.statusCode = logged === null ? 404 : 204
          response.end()
        },
        (error: unknown) => {
          response.statusCode = 500
          response.end(String(error))
        },
      )
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    return server
  }

  async function start(): Promise<Child> {
    const callback = await callbackServer()
    const address = callback.address()
    const port = typeof address === 'object' && address !== null ? address.port : 0
    const { file, args } = command(runtime)
    const child = spawn(file, args, {
      cwd: ROOT,
      env: {
        ...process.env,
        CALLBACK_URL: `http://127.0.0.1:${port}`,
        IDEMPOTENCY_SECRET: randomBytes(32).toString('hex'),
        DENO_NO_UPDATE_CHECK: '1',
        NO_COLOR: '1',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    try {
      const control = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`${runtime} did not start ${SERVER} within ${START_TIMEOUT_MS} ms: ${output}`)),
          START_TIMEOUT_MS,
        )
        child.stdout?.on('data', (chunk: Buffer) => {
          output += chunk.toString()
          const match = /control (\d+)/.exec(output)
          if (match) {
            clearTimeout(timer)
            resolve(`http://127.0.0.1:${match[1]}`)
          }
        })
        child.stderr?.on('data', (chunk: Buffer) => {
          output += chunk.toString()
          // IDEMKIT_RUNTIME_OUTPUT=1: the runtime's errors as they come, to see why a request failed there.
          if (process.env.IDEMKIT_RUNTIME_OUTPUT === '1') process.stderr.write(chunk)
        })
        child.once('error', (error) => {
          clearTimeout(timer)
          reject(new Error(`${file} could not be run: ${error.message}`))
        })
        child.once('exit', (code, signal) => {
          clearTimeout(timer)
          reject(new Error(`${runtime} exited (${code ?? signal}) before it listened: ${output}`))
        })
      })
      return { process: child, control, callback }
    } catch (error) {
      await stopChild(child)
      await new Promise<void>((resolve) => callback.close(() => resolve()))
      throw error
    }
  }

  async function startApp(
    spec: Record<string, unknown>,
    store: IdempotencyStore,
  ): Promise<RunningApp & { id: number }> {
    started ??= start()
    const child = await started
    const storeOf = storeSpec(store)
    if (storeOf === undefined) throw new Error(`the ${runtime} adapter runs only stores made by test/helpers/stores.ts`)
    const response = await fetch(`${child.control}/apps`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...spec, store: storeOf }),
    })
    if (!response.ok) throw new Error(`${runtime} could not start the app: ${await response.text()}`)
    const { id, port } = (await response.json()) as { id: number; port: number }
    const lines: string[] = []
    logs.set(id, lines)
    return {
      id,
      url: `http://127.0.0.1:${port}`,
      port,
      logs: lines,
      async close() {
        await fetch(`${child.control}/apps/${id}`, { method: 'DELETE' })
        routes.delete(id)
        logs.delete(id)
      },
    }
  }

  return {
    name: `fetch-${runtime}`,
    example(store, options = {}) {
      return startApp({ kind: 'example', leaseMs: options.leaseMs, waitMs: options.waitMs }, store)
    },
    async custom(store, list) {
      const app = await startApp(
        { kind: 'custom', routes: list.map((route) => ({ path: route.path, options: route.options })) },
        store,
      )
      routes.set(app.id, list)
      return app
    },
    async stop() {
      if (started === undefined) return
      const child = await started.catch(() => undefined)
      started = undefined
      if (child === undefined) return
      await stopChild(child.process)
      child.callback.closeAllConnections()
      await new Promise<void>((resolve) => child.callback.close(() => resolve()))
    },
  }
}
