/**
 * What test/http/table.test.ts runs on: every in-process adapter (ADAPTERS) on every store
 * (STORES); or, under vitest.runtimes.config.ts (IDEMKIT_TABLE_RUNTIMES=bun,deno), `idemkit/fetch`
 * served by Bun and Deno processes (test/helpers/runtime-adapter.ts) on the memory and Redis
 * stores, their processes stopped after the file.
 */
import { afterAll } from 'vitest'
import { ADAPTERS, type Adapter } from './adapters.js'
import { type Runtime, runtimeAdapter } from './runtime-adapter.js'
import { createMemoryStore, createRedisStore, STORES, type StoreFactory } from './stores.js'

export interface TableTargets {
  readonly adapters: readonly (readonly [name: string, adapter: Adapter])[]
  readonly stores: readonly StoreFactory[]
}

export function tableTargets(): TableTargets {
  const runtimes = process.env.IDEMKIT_TABLE_RUNTIMES
  if (!runtimes) return { adapters: ADAPTERS, stores: STORES }
  const adapters = runtimes.split(',').map((runtime) => runtimeAdapter(runtime.trim() as Runtime))
  afterAll(async () => {
    await Promise.all(adapters.map((adapter) => adapter.stop()))
  }, 30_000)
  return {
    adapters: adapters.map((adapter) => [adapter.name, adapter] as const),
    stores: [
      ['memory', createMemoryStore],
      ['redis', createRedisStore],
    ],
  }
}
