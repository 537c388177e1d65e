/**
 * Faults 1 and 18, one body on each store: 100 concurrent requests with one key across two app
 * processes, 100 trials. The apps stay up across trials; every trial uses a fresh key.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import {
  expectOncePerTrial,
  REQUESTS,
  runTrial,
  summarise,
  TRIALS,
  type TrialResult,
} from '../helpers/concurrency-trials.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { startFaultApp } from '../helpers/fault-app.js'
import { range, recordFigures } from '../helpers/figures.js'

export interface ConcurrencyFault {
  /** The fault's number, in its describe block, its user and its figures. */
  readonly fault: string
  /** The describe block's name. */
  readonly suite: string
  /** The title of its figures in the fault summary. */
  readonly title: string
  /** The apps' store settings (`REDIS_URL`, `DATABASE_URL`), read when the apps start. */
  storeEnv(): Record<string, string>
}

export function describeConcurrencyFault({ fault, suite, title, storeEnv }: ConcurrencyFault): void {
  describe(suite, () => {
    let apps: AppProcess[] = []
    let log: ExecutionLog

    beforeAll(async () => {
      log = createExecutionLog()
      const env = { ...storeEnv(), EXECUTION_LOG: log.path }
      apps = await Promise.all([startFaultApp(env), startFaultApp(env)])
    })

    afterAll(async () => {
      await Promise.all(apps.map((app) => app.stop()))
      log.remove()
    })

    it('executes once per trial, answers every other request 409 or the identical replay, and never 5xx', async (context) => {
      const user = `fault${fault}-${randomUUID().slice(0, 8)}`
      const started = Date.now()
      const trials: TrialResult[] = []

      for (let trial = 0; trial < TRIALS; trial++) trials.push(await runTrial(apps, user, trial))
      const summary = summarise(trials, log, user)

      recordFigures(context, fault, title, {
        trials: TRIALS,
        requests: TRIALS * REQUESTS,
        'executions per trial': range(summary.executionsPerTrial),
        'fresh 201 per trial': range(summary.fresh),
        'distinct 2xx bodies per trial': range(summary.distinctBodies),
        'answers by status': summary.statuses,
        replays: summary.replays,
        '409 in flight': summary.conflicts,
        '5xx or no answer': summary.serverErrors,
        'wall time s': Math.round((Date.now() - started) / 1000),
      })
      expectOncePerTrial(summary)
    })
  })
}
