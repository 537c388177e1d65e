import { createRedisStore } from '../helpers/stores.js'
import { describeStoreContract } from './store-contract.js'

// Flushes data and scripts before each test (createRedisStore), so NOSCRIPT reloads run all the time.
describeStoreContract('redis', createRedisStore)
