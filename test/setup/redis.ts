/**
 * vitest global setup: one throwaway redis-server on a free 127.0.0.1 port for the whole run,
 * stopped by PID when the run ends. Test files reach it with `inject('redisUrl')`.
 */
import 'vitest'
import type { TestProject } from 'vitest/node'
import { type RedisServer, startRedisServer } from '../../scripts/redis-server.js'

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string
    redisPid: number
  }
}

let server: RedisServer | undefined

export async function setup(project: TestProject): Promise<void> {
  server = await startRedisServer()
  project.provide('redisUrl', server.url)
  project.provide('redisPid', server.pid)
}

export async function teardown(): Promise<void> {
  await server?.stop()
}
