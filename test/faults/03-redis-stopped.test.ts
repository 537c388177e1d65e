/**
 * Fault 3: Redis stopped (SIGKILL) when requests arrive to claim, on every adapter: 503 with
 * Retry-After and the handler not run; after Redis is back, each key runs exactly once and then
 * replays.
 */
import { FAULT_APPS, redisReady } from '../helpers/fault-app.js'
import { startFaultRedis } from '../helpers/fault-redis.js'
import { describeStoreStoppedFault } from './store-stopped.js'

describeStoreStoppedFault({
  fault: '3',
  store: 'Redis',
  apps: FAULT_APPS,
  warmUp: false,
  timed: false,
  async start() {
    const redis = await startFaultRedis()
    return {
      appEnv: { REDIS_URL: redis.url, REDIS_COMMAND_TIMEOUT_MS: '1000' },
      stop: () => redis.kill(),
      async restart(app) {
        await redis.restart()
        await redisReady(app)
      },
      teardown: () => redis.stop(),
    }
  },
})
