import { describeStoreContract } from '../../src/testing/index.js'
import { createRedisStore } from '../helpers/stores.js'

// Flushes data and scripts before each test (createRedisStore), so NOSCRIPT reloads run all the time.
describeStoreContract(createRedisStore, { name: 'redis' })
