/**
 * Fault 18: fault 1's workload on the PostgreSQL store: 100 concurrent requests with one key
 * across two app processes, 100 trials, on the suite's own cluster. Concurrent claims
 * serialise on the key's row; exactly one runs the handler.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, inject, it } from 'vitest'
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

describe('fault 18: one key, 100 concurrent requests, two app processes, on PostgreSQL', () => {
  let apps: AppProcess[] = []
  let log: ExecutionLog

  beforeAll(async () => {
    log = createExecutionLog()
    const env = { DATABASE_URL: inject('postgresUrl'), EXECUTION_LOG: log.path }
    apps = await Promise.all([startFaultApp(env), startFaultApp(env)])
  })

  afterAll(async () => {
    await Promise.all(apps.map((app) => app.stop()))
    log.remove()
  })

  it('executes once per trial, answers every other request 409 or the identical replay, and never 5xx', async (context) => {
    const user = `fault18-${randomUUID().slice(0, 8)}`
    const started = Date.now()
    const trials: TrialResult[] = []

    for (let trial = 0; trial < TRIALS; trial++) trials.push(await runTrial(apps, user, trial))
    const summary = summarise(trials, log, user)

    recordFigures(context, '18', 'one key, 100 concurrent requests across two app processes, PostgreSQL store', {
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
