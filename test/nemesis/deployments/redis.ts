/**
 * The standalone Redis deployment (append-only, `appendfsync always`, its wall clock 20 s ahead
 * of the apps' under the clock shim and stepped by `clock-step`), reached through the run's
 * proxies, and the faults every Redis deployment shares: SCRIPT and FUNCTION FLUSH, and CLIENT
 * KILL.
 */
import { Redis } from 'ioredis'
import { redisStore } from '../../../src/stores/redis/index.js'
import { buildClockShim } from '../../helpers/clock-shim.js'
import { type FaultRedis, startFaultRedis } from '../../helpers/fault-redis.js'
import type { FaultKind } from '../schedule.js'
import { clockStep, INITIAL_SHIFT_MS, redisOffset } from './clock.js'
import { type Deployment, type StoreFault, sleep } from './types.js'

/** A client of one Redis node, and what to do with it when done. */
export interface AdminClient {
  readonly client: Redis | undefined
  done(): void
}

/** A client of node `node` (on a cluster each node has its own scripts and clients). */
export type Admin = (node: number) => Promise<AdminClient>

/** A client of its own for an admin call, closed when done. */
export function ownClient(port: number): AdminClient {
  const client = new Redis({ port, host: '127.0.0.1', commandTimeout: 2_000 })
  client.on('error', () => {})
  return { client, done: () => client.disconnect() }
}

/** The faults of every Redis deployment, on its `nodes` nodes. */
export function redisAdminFaults(admin: Admin, nodes: number): Partial<Record<FaultKind, StoreFault>> {
  return {
    'script-flush': async () => {
      const replies: string[] = []
      for (let node = 0; node < nodes; node++) {
        const { client, done } = await admin(node)
        replies.push(String(await client?.script('FLUSH')))
        replies.push(String(await client?.call('FUNCTION', 'FLUSH')))
        done()
      }
      return replies.join(', ')
    },
    'client-kill': async ({ instance }) => {
      const { client, done } = await admin(instance)
      const detail = `${String(await client?.client('KILL', 'TYPE', 'normal'))} connections`
      done()
      return detail
    },
  }
}

/** A store reading one Redis node's records. */
export function redisReader(port: number): Awaited<ReturnType<Deployment['reader']>> {
  const client = new Redis({ port, host: '127.0.0.1', commandTimeout: 5_000, maxRetriesPerRequest: 1 })
  client.on('error', () => {})
  return { store: redisStore({ redis: client }), close: async () => client.disconnect() }
}

/** How long (ms) a restarted Redis took to load its data set (`INFO persistence` `loading:0`). */
async function untilLoaded(redis: FaultRedis, limitMs = 300_000): Promise<number> {
  const started = performance.now()
  for (;;) {
    const persistence = await redis.info('persistence').catch(() => undefined)
    if (persistence?.loading === '0') return Math.round(performance.now() - started)
    if (performance.now() - started > limitMs) {
      throw new Error(`the restarted Redis was still loading its data after ${limitMs} ms`)
    }
    await sleep(100)
  }
}

export async function startRedisDeployment(): Promise<Deployment> {
  const shim = buildClockShim(INITIAL_SHIFT_MS)
  const redis = await startFaultRedis({ aof: true, config: { appendfsync: 'always' }, env: shim.env }).catch(
    (error) => {
      shim.remove()
      throw error
    },
  )
  const shared = redis.admin()
  const admin: Admin = async () => ({ client: shared, done: () => {} })
  return {
    proxiedPort: redis.port,
    env: (proxyPort) => ({ REDIS_URL: `redis://127.0.0.1:${proxyPort}` }),
    faults: {
      'store-pause': async ({ fault }) => {
        redis.pause()
        await sleep(fault.durationMs)
        redis.resume()
        return undefined
      },
      'store-kill': async ({ fault }) => {
        await redis.kill()
        await sleep(fault.durationMs)
        await redis.restart()
        // Healed once Redis answers commands: after it loaded its append-only file, which takes
        // longer the more records it holds. The fault's detail says how long that took, so a
        // recovery measured from the heal is the layer's own.
        return `append-only file loaded in ${await untilLoaded(redis)} ms`
      },
      'clock-step': clockStep(
        () => [shim],
        () => redisOffset(shared),
      ),
      ...redisAdminFaults(admin, 1),
    },
    reader: async () => redisReader(redis.port),
    databaseUrl: () => undefined,
    async stop() {
      await redis.stop()
      shim.remove()
    },
  }
}
