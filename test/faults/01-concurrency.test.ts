/**
 * Fault 1: 100 concurrent requests with one key across two app processes, 100 trials, on the
 * Redis store. The apps stay up across trials; every trial uses a fresh key.
 */
import { inject } from 'vitest'
import { describeConcurrencyFault } from './concurrency.js'

describeConcurrencyFault({
  fault: '1',
  suite: 'fault 1: one key, 100 concurrent requests, two app processes',
  title: 'one key, 100 concurrent requests across two app processes',
  storeEnv: () => ({ REDIS_URL: inject('redisUrl') }),
})
