/**
 * Fault 8: Redis restarted. With the append-only file (appendfsync everysec) a completed key
 * written more than a second before a crash (SIGKILL) still replays. Without persistence the
 * record is lost: the store sees a new run_id on reconnect and logs it, and a retry of the lost
 * key runs its handler again. That second run is the documented non-guarantee (README
 * "Guarantees and failure modes"); this test pins it down so the log line cannot go missing.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { post, redisReady, sleep, startFaultApp, until } from '../helpers/fault-app.js'
import { type FaultRedis, startFaultRedis } from '../helpers/fault-redis.js'
import { recordFigures } from '../helpers/figures.js'

const USER = 'fault8'
const RESTART_LOG = /restarted or failed over \(run_id (\w+) -> (\w+), (\d+) keys now\)/g

describe('fault 8: Redis restarted with and without persistence', () => {
  let redis: FaultRedis
  let app: AppProcess
  let log: ExecutionLog

  beforeAll(async () => {
    redis = await startFaultRedis({ aof: true })
    log = createExecutionLog()
    app = await startFaultApp({ REDIS_URL: redis.url, EXECUTION_LOG: log.path })
  })

  afterAll(async () => {
    await app.stop()
    await redis.stop()
    log.remove()
  })

  /** Each restart the app logged, once (the message appears in the line and in its event). */
  const restartsLogged = () => {
    const seen = new Map<string, RegExpMatchArray>()
    for (const match of app.output().matchAll(RESTART_LOG)) seen.set(`${match[1]}>${match[2]}`, match)
    return [...seen.values()]
  }

  it('replays a completed key after a crash with AOF, and detects and logs the loss without persistence', async (context) => {
    const body = { item: 'book', qty: 1 }
    const kept = randomUUID()
    const lost = randomUUID()

    // With AOF: complete, let everysec fsync it, crash, restart from the file.
    const keptFirst = await post(app.url, { user: USER, key: kept, body })
    await sleep(1_500)
    const runIdBefore = (await redis.info('server')).run_id
    await redis.kill()
    await redis.restart({ aof: true })
    await redisReady(app)
    await until('the first restart to be logged', () => (restartsLogged().length >= 1 ? true : undefined))
    const keptRetry = await post(app.url, { user: USER, key: kept, body })
    const aofRestart = restartsLogged()[0]

    // Without persistence: restart without AOF, complete a key, crash, restart.
    await redis.restart({ aof: false })
    await redisReady(app)
    await until('the second restart to be logged', () => (restartsLogged().length >= 2 ? true : undefined))
    const lostFirst = await post(app.url, { user: USER, key: lost, body })
    const runIdLost = (await redis.info('server')).run_id
    await redis.kill()
    await redis.restart({ aof: false })
    await redisReady(app)
    await until('the third restart to be logged', () => (restartsLogged().length >= 3 ? true : undefined))
    const lostRetry = await post(app.url, { user: USER, key: lost, body })
    const lossLogged = restartsLogged()[2]
    const counts = log.countsByScope()

    recordFigures(context, '8', 'Redis restarted with AOF (everysec) and without persistence', {
      'AOF: first answer, retry after crash': `${keptFirst.status}, ${keptRetry.status}${keptRetry.replayed ? ' replay' : ''}`,
      'AOF: executions': counts.get(`${USER}/${kept}`) ?? 0,
      'AOF: restart logged (run_id change, keys now)': aofRestart
        ? `${aofRestart[1]} -> ${aofRestart[2]}, ${aofRestart[3]} keys`
        : 'no',
      'no persistence: first answer, retry after crash': `${lostFirst.status}, ${lostRetry.status}${lostRetry.replayed ? ' replay' : ''}`,
      'no persistence: executions (the loss: documented)': counts.get(`${USER}/${lost}`) ?? 0,
      'no persistence: loss logged (run_id change, keys now)': lossLogged
        ? `${lossLogged[1]} -> ${lossLogged[2]}, ${lossLogged[3]} keys`
        : 'no',
    })
    expect(keptFirst).toMatchObject({ status: 201, replayed: false })
    expect(keptRetry).toMatchObject({ status: 201, replayed: true, body: keptFirst.body })
    expect(counts.get(`${USER}/${kept}`)).toBe(1)
    expect(aofRestart?.[1]).toBe(runIdBefore)
    // The record was lost with the restart: detected (a new run_id, 0 keys) and logged, then
    // the retry ran the handler a second time.
    expect(lossLogged).toBeDefined()
    expect(lossLogged?.[1]).toBe(runIdLost)
    expect(lossLogged?.[2]).not.toBe(runIdLost)
    expect(lossLogged?.[3]).toBe('0')
    expect(lostFirst).toMatchObject({ status: 201, replayed: false })
    expect(lostRetry).toMatchObject({ status: 201, replayed: false })
    expect(lostRetry.body).not.toBe(lostFirst.body)
    expect(counts.get(`${USER}/${lost}`)).toBe(2)
  })
})
