/**
 * `npm run example`: the order service (examples/fastify-app.ts, port 3000) and the payment
 * service it charges through (examples/payments-app.ts, port 3001), each its own process, as
 * they would be deployed. Like a process supervisor, it starts the order service again when it
 * dies, so a crash can be watched and retried (docs/across-services.md). Ctrl-C stops both.
 *
 * Env: what both apps read (REDIS_URL or DATABASE_URL, IDEMPOTENCY_SECRET, ...), PORT (3000,
 * the order service's) and PAYMENTS_PORT (3001).
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

const here = (file: string) => fileURLToPath(new URL(file, import.meta.url))
const host = process.env.HOST ?? '127.0.0.1'
const paymentsPort = process.env.PAYMENTS_PORT ?? '3001'
let stopping = false

/** Starts one service with `tsx`, its log lines prefixed with its name. */
function start(name: string, file: string, env: NodeJS.ProcessEnv): ChildProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', here(file)], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  for (const stream of [child.stdout, child.stderr]) {
    if (stream !== null) createInterface({ input: stream }).on('line', (line) => console.log(`[${name}] ${line}`))
  }
  console.log(`[services] ${name} started, pid ${child.pid}`)
  return child
}

const payments = start('payments', './payments-app.ts', { PORT: paymentsPort })
let orders: ChildProcess

function startOrders(): void {
  orders = start('orders', './fastify-app.ts', { PAYMENTS_URL: `http://${host}:${paymentsPort}` })
  orders.once('exit', (code, signal) => {
    if (stopping) return
    // Killed (a crash): start it again. Exited by itself (a port in use, a bad setting): stop.
    if (signal === null) {
      console.log(`[services] orders exited with code ${code}; stopping`)
      stop(1)
      return
    }
    console.log(`[services] orders was killed (${signal}); starting it again`)
    setTimeout(startOrders, 300)
  })
}
startOrders()

payments.once('exit', (code, signal) => {
  if (stopping) return
  console.log(`[services] payments exited (${signal ?? `code ${code}`}); stopping`)
  stop(1)
})

function stop(code: number): void {
  if (stopping) return
  stopping = true
  const running = () => [orders, payments].filter((child) => child.exitCode === null && child.signalCode === null)
  for (const child of running()) child.kill('SIGTERM')
  // A service that does not stop within 2 s is killed: none outlives the example.
  setTimeout(() => {
    for (const child of running()) child.kill('SIGKILL')
    process.exit(code)
  }, 2_000)
  Promise.all(running().map((child) => new Promise((resolve) => child.once('exit', resolve)))).then(() =>
    process.exit(code),
  )
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => stop(0))
