import { describeStoreContract } from '../../src/testing/index.js'
import { createRedisStore } from '../helpers/stores.js'

// Flushes data, scripts and functions before each test (createRedisStore), so the library loads
// run all the time.
describeStoreContract(createRedisStore, { name: 'redis' })
// The same contract with the operations sent as EVALSHA scripts (where Redis refuses FUNCTION),
// through ioredis's NOSCRIPT reloads.
describeStoreContract(() => createRedisStore({ functions: false }), { name: 'redis (EVALSHA scripts)' })
