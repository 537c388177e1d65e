/**
 * Faults 3 and 15, one body on each store: the store stopped when requests arrive to claim:
 * 503 store-unavailable with Retry-After and the handler not run; after a restart on the same
 * data, each key runs exactly once and then replays.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { post, startFaultApp } from '../helpers/fault-app.js'
import { recordFigures, tally } from '../helpers/figures.js'

const KEYS = 20

/** A store server of the test's own, which it stops and starts again. */
export interface StoppableStore {
  /** The app's settings for this server. */
  readonly appEnv: Record<string, string>
  /** Stops it the hard way (SIGKILL, an immediate shutdown). */
  stop(): Promise<void>
  /** Starts it again on the same port and data, and waits until `app` can use it. */
  restart(app: AppProcess): Promise<void>
  /** Ends it for good. */
  teardown(): Promise<void>
}

export interface StoreStoppedFault {
  readonly fault: string
  /** The store's name in the test's names: `Redis`, `PostgreSQL`. */
  readonly store: string
  /** The fault apps by adapter, one describe block each; without, the Fastify fault app alone. */
  readonly apps?: readonly (readonly [adapter: string, script: string])[]
  /** A first request before the stop, so the stop also drops live connections (a pool's). */
  readonly warmUp: boolean
  /** Records how long the answers while down took (`all answered within ms`). */
  readonly timed: boolean
  start(): Promise<StoppableStore>
}

export function describeStoreStoppedFault(spec: StoreStoppedFault): void {
  const suite = `fault ${spec.fault}: ${spec.store} stopped at claim`
  if (spec.apps === undefined) describe(suite, () => storeStoppedBody(spec, undefined))
  else describe.each(spec.apps)(`${suite} (%s)`, (adapter, script) => storeStoppedBody(spec, [adapter, script]))
}

function storeStoppedBody(spec: StoreStoppedFault, app: readonly [adapter: string, script: string] | undefined): void {
  let server: StoppableStore
  let running: AppProcess
  let log: ExecutionLog

  beforeAll(async () => {
    server = await spec.start()
    log = createExecutionLog()
    running = await startFaultApp({ ...server.appEnv, EXECUTION_LOG: log.path }, app?.[1])
  })

  afterAll(async () => {
    await running.stop()
    await server.teardown()
    log.remove()
  })

  it(`answers 503 with Retry-After and runs nothing while ${spec.store} is down, then runs each key once`, async (context) => {
    const user = `fault${spec.fault}`
    const keys = Array.from({ length: KEYS }, () => randomUUID())
    const body = { item: 'book', qty: 1 }
    if (spec.warmUp) expect((await post(running.url, { user, key: 'warm-up', body })).status).toBe(201)
    const executionsBefore = log.executions().length
    await server.stop()

    const started = Date.now()
    const down = await Promise.all(keys.map((key) => post(running.url, { user, key, body, deadlineMs: 10_000 })))
    const downMs = Date.now() - started
    const executionsWhileDown = log.executions().length - executionsBefore
    await server.restart(running)
    const first = await Promise.all(keys.map((key) => post(running.url, { user, key, body })))
    const again = await Promise.all(keys.map((key) => post(running.url, { user, key, body })))
    const counts = log.countsByScope()

    const title = `${spec.store} stopped at claim, then restarted${app === undefined ? '' : ` (${app[0]})`}`
    recordFigures(context, spec.fault, title, {
      'requests while down': KEYS,
      'answers while down': tally(down.map((a) => `${a.status} ${a.code ?? ''} retry-after=${a.retryAfter}`)),
      ...(spec.timed ? { 'all answered within ms': downMs } : {}),
      'executions while down': executionsWhileDown,
      'answers after restart': tally(first.map((a) => `${a.status}${a.replayed ? ' replay' : ''}`)),
      'retries after that': tally(again.map((a) => `${a.status}${a.replayed ? ' replay' : ''}`)),
      'executions per key': tally(keys.map((key) => counts.get(`${user}/${key}`) ?? 0)),
    })
    for (const answer of down) {
      expect(answer).toMatchObject({ status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
      expect(Number(answer.retryAfter)).toBeGreaterThanOrEqual(1)
    }
    expect(executionsWhileDown).toBe(0)
    expect(first.every((a) => a.status === 201 && !a.replayed)).toBe(true)
    expect(again.every((a, i) => a.status === 201 && a.replayed && a.body === first[i]?.body)).toBe(true)
    expect(keys.every((key) => counts.get(`${user}/${key}`) === 1)).toBe(true)
  })
}
