/**
 * Fault 7: SCRIPT FLUSH and FUNCTION FLUSH between requests, between claim and complete, and in a
 * loop under concurrent load. The store loads its functions library again on "Function not
 * found" and sends the call again (it did not run); where it sends scripts, ioredis re-sends a
 * script as EVAL on NOSCRIPT: no request may fail.
 */
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, post, sleep, startFaultApp, until } from '../helpers/fault-app.js'
import { recordFigures, tally } from '../helpers/figures.js'

const USER = 'fault7'

describe('fault 7: SCRIPT FLUSH and FUNCTION FLUSH', () => {
  let app: AppProcess
  let log: ExecutionLog
  let admin: Redis

  beforeAll(async () => {
    log = createExecutionLog()
    app = await startFaultApp({ REDIS_URL: inject('redisUrl'), EXECUTION_LOG: log.path })
    admin = new Redis(inject('redisUrl'))
  })

  afterAll(async () => {
    await app.stop()
    admin.disconnect()
    log.remove()
  })

  /** SCRIPT FLUSH and FUNCTION FLUSH, together. */
  const flush = async () => {
    await admin.pipeline().script('FLUSH').call('FUNCTION', 'FLUSH').exec()
  }

  it('fails no request when scripts and functions are flushed between requests, mid-request and under load', async (context) => {
    const answers: Answer[] = []
    const keys: string[] = []
    const flushes = { between: 0, midRequest: 0, underLoad: 0 }

    // Between requests: every first request and every replay follows a flush.
    for (let i = 0; i < 20; i++) {
      const key = randomUUID()
      keys.push(key)
      await flush()
      answers.push(await post(app.url, { user: USER, key, body: { item: 'between', qty: 1 } }))
      await flush()
      answers.push(await post(app.url, { user: USER, key, body: { item: 'between', qty: 1 } }))
      flushes.between += 2
    }
    // Between claim and complete: flushed while the handler runs.
    for (let i = 0; i < 10; i++) {
      const key = randomUUID()
      keys.push(key)
      const pending = post(app.url, { user: USER, key, body: { item: 'mid', qty: 1, delayMs: 100 } })
      await until('the handler to start', () => (log.executions((e) => e.key === key).length === 1 ? true : undefined))
      await flush()
      flushes.midRequest++
      answers.push(await pending)
    }
    // Under load: 200 requests, 20 at a time, while scripts are flushed every 5 ms.
    let loading = true
    const flusher = (async () => {
      while (loading) {
        await flush()
        flushes.underLoad++
        await sleep(5)
      }
    })()
    const loadKeys = Array.from({ length: 200 }, () => randomUUID())
    keys.push(...loadKeys)
    for (let i = 0; i < loadKeys.length; i += 20) {
      answers.push(
        ...(await Promise.all(
          loadKeys.slice(i, i + 20).map((key) => post(app.url, { user: USER, key, body: { item: 'load', qty: 1 } })),
        )),
      )
    }
    loading = false
    await flusher
    const counts = log.countsByScope()

    recordFigures(
      context,
      '7',
      'SCRIPT FLUSH and FUNCTION FLUSH between requests, between claim and complete, under load',
      {
        'script flushes (between / mid-request / under load)': `${flushes.between} / ${flushes.midRequest} / ${flushes.underLoad}`,
        requests: answers.length,
        answers: tally(answers.map((a) => `${a.status}${a.replayed ? ' replay' : ''}`)),
        'executions per key': tally(keys.map((key) => counts.get(`${USER}/${key}`) ?? 0)),
      },
    )
    expect(answers.every((a) => a.status === 201)).toBe(true)
    expect(keys.every((key) => counts.get(`${USER}/${key}`) === 1)).toBe(true)
  })
})
