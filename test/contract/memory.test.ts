import { memoryStore } from '../../src/stores/memory/index.js'
import { describeStoreContract } from '../../src/testing/index.js'

describeStoreContract(() => memoryStore({ keyPrefix: 'contract' }), { name: 'memory' })

// The same contract with the sweep running every few milliseconds: deleting expired records
// must change no answer, exactly as Redis dropping a key at its PEXPIREAT changes none.
describeStoreContract(() => memoryStore({ keyPrefix: 'contract', sweepIntervalMs: 5 }), {
  name: 'memory with a fast sweep',
})
