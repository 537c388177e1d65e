import { describeStoreContract } from '../../src/testing/index.js'
import { createRedisStore } from '../helpers/stores.js'

// Flushes data, scripts and functions before each test (createRedisStore), so the library loads
// run all the time.
describeStoreContract(createRedisStore, { name: 'redis' })
// The same contract with the operations sent as EVALSHA scripts (where Redis refuses FUNCTION),
// through ioredis's NOSCRIPT reloads.
describeStoreContract(() => createRedisStore({ functions: false }), { name: 'redis (EVALSHA scripts)' })
// The same contract on clients with options that change how commands are written: a key prefix
// of the client's own, and ioredis's auto-pipelining (the store's byte-carrying commands are
// written as one frame of its own otherwise, src/stores/redis/framed.ts).
describeStoreContract(() => createRedisStore({}, { keyPrefix: 'app:' }), { name: "redis (a client's keyPrefix)" })
describeStoreContract(() => createRedisStore({}, { enableAutoPipelining: true }), {
  name: 'redis (enableAutoPipelining)',
})
// The same contract with the one-command completion (src/stores/redis/one-command.ts): SET ...
// IFEQ where the server has it (Valkey 8.1), compare-and-set.lua on Redis 7.0 and Valkey 8.0.
describeStoreContract(() => createRedisStore({ oneCommandCompletion: true }), {
  name: 'redis (oneCommandCompletion)',
})
