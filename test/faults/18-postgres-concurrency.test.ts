/**
 * Fault 18: fault 1's workload on the PostgreSQL store: 100 concurrent requests with one key
 * across two app processes, 100 trials, on the suite's own cluster. Concurrent claims
 * serialise on the key's row; exactly one runs the handler.
 */
import { inject } from 'vitest'
import { describeConcurrencyFault } from './concurrency.js'

describeConcurrencyFault({
  fault: '18',
  suite: 'fault 18: one key, 100 concurrent requests, two app processes, on PostgreSQL',
  title: 'one key, 100 concurrent requests across two app processes, PostgreSQL store',
  storeEnv: () => ({ DATABASE_URL: inject('postgresUrl') }),
})
