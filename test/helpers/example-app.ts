/**
 * The example app on a given store, for HTTP tests, with its log lines captured.
 */
import { Writable } from 'node:stream'
import type { FastifyInstance } from 'fastify'
import { buildExampleApp } from '../../examples/fastify-app.js'
import type { IdempotencyStore } from '../../src/core/store.js'

export const SECRET = 's'.repeat(32)

export interface TestApp {
  readonly app: FastifyInstance
  readonly logs: string[]
}

export async function exampleApp(store: IdempotencyStore, leaseMs?: number): Promise<TestApp> {
  const logs: string[] = []
  const stream = new Writable({
    write(chunk, _encoding, done) {
      logs.push(chunk.toString())
      done()
    },
  })
  const app = await buildExampleApp({ store, secret: SECRET, leaseMs, logger: { level: 'info', stream } })
  await app.ready()
  return { app, logs }
}

/** Headers of an authenticated idempotent JSON request. */
export function headers(user: string, key?: string): Record<string, string> {
  const out: Record<string, string> = { authorization: `Bearer ${user}`, 'content-type': 'application/json' }
  if (key !== undefined) out['idempotency-key'] = key
  return out
}
