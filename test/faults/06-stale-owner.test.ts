/**
 * Fault 6: a stale owner. App A is SIGSTOPped mid-handler past its lease; app B takes the scope
 * over (expiredExecution 'takeover'), writes to the fencing sink and completes. Then A is
 * resumed mid-handler: its renew and its complete are refused, its AbortSignal fires, and when
 * it writes anyway (its handler ignores the signal: the worst case) the sink rejects its lower
 * fencing token. The answer kept is B's.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { type Answer, post, sleep, startFaultApp, until } from '../helpers/fault-app.js'
import { type FencingSink, startFencingSink } from '../helpers/fencing-sink.js'
import { recordFigures, tally } from '../helpers/figures.js'

const LEASE_MS = 1_000
const USER = 'fault6'

describe('fault 6: a stale owner resumed after a takeover', () => {
  let stale: AppProcess
  let fresh: AppProcess
  let log: ExecutionLog
  let sink: FencingSink

  beforeAll(async () => {
    log = createExecutionLog()
    sink = await startFencingSink()
    const env = {
      REDIS_URL: inject('redisUrl'),
      EXECUTION_LOG: log.path,
      SINK_URL: sink.url,
      IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
      LOG_LEVEL: 'info',
    }
    // A is still mid-handler (3 s more) when B has finished: it resumes, then writes.
    ;[stale, fresh] = await Promise.all([startFaultApp({ ...env, EXTRA_DELAY_MS: '3000' }), startFaultApp(env)])
  })

  afterAll(async () => {
    await Promise.all([stale.stop(), fresh.stop()])
    await sink.close()
    log.remove()
  })

  it('refuses the stale owner renew and complete, fires its signal, and the sink rejects its token', async (context) => {
    const key = randomUUID()
    const body = { item: 'transfer', qty: 1, delayMs: 1_500, sink: true }
    const send = (app: AppProcess) => post(app.url, { user: USER, key, body, path: '/orders-takeover' })

    const staleAnswer = send(stale)
    await until('the stale handler to start', () => (log.executions().length === 1 ? true : undefined))
    process.kill(stale.pid, 'SIGSTOP')
    let freshAnswers: Answer[] = []
    try {
      // B retries as a client would: 409 while A's lease lasts, then it takes over.
      for (let i = 0; i < 40; i++) {
        const answer = await send(fresh)
        freshAnswers.push(answer)
        if (answer.status !== 409) break
        await sleep(100)
      }
    } finally {
      process.kill(stale.pid, 'SIGCONT')
    }
    const staleResult = await staleAnswer
    await until('the stale signal to be logged', () =>
      log.entries().some((e) => e.type === 'signal' && e.pid === stale.pid) ? true : undefined,
    )
    await sleep(200)
    const replay = await send(fresh)
    const staleLog = stale.output()
    const entries = log.entries()
    const staleSink = entries.find((e) => e.type === 'sink' && e.pid === stale.pid)

    freshAnswers = freshAnswers.filter(Boolean)
    const last = freshAnswers.at(-1) as Answer
    recordFigures(context, '6', 'stale owner resumed after a takeover', {
      'B retries while A held the lease': tally(freshAnswers.map((a) => `${a.status}${a.code ? ` ${a.code}` : ''}`)),
      'executions (pid:fencing token)': entries
        .filter((e) => e.type === 'execution')
        .map((e) => `${e.pid === stale.pid ? 'A' : 'B'}:${e.token}`)
        .join(', '),
      'sink writes (token accepted?)': sink.writes
        .map((w) => `${w.token}:${w.accepted ? 'accepted' : 'rejected'}`)
        .join(', '),
      "A's signal had fired when A wrote": String(staleSink?.aborted),
      "A's renew refused (log)": staleLog.includes('idempotency lease lost to a takeover'),
      "A's complete refused (log)": staleLog.includes('LOST_OWNERSHIP'),
      "A's client got": `${staleResult.status} ${staleResult.code ?? ''}`,
      'replay afterwards': `${replay.status}${replay.replayed ? ' replay' : ''} token ${JSON.parse(replay.body).token}`,
    })
    expect(last).toMatchObject({ status: 201, replayed: false })
    expect(JSON.parse(last.body).token).toBe(2)
    expect(sink.writes.map((w) => [w.token, w.accepted])).toEqual([
      [2, true],
      [1, false],
    ])
    expect(entries.some((e) => e.type === 'signal' && e.pid === stale.pid && e.token === 1)).toBe(true)
    expect(staleSink).toMatchObject({ token: 1, accepted: false, aborted: true })
    expect(staleLog).toContain('idempotency lease lost to a takeover')
    expect(staleLog).toContain('LOST_OWNERSHIP')
    expect(staleResult).toMatchObject({ status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE' })
    expect(replay).toMatchObject({ status: 201, replayed: true, body: last.body })
  })
})
