import { memoryStore } from '../../src/stores/memory/index.js'
import { describeStoreContract } from './store-contract.js'

describeStoreContract('memory', async () => {
  const store = memoryStore({ keyPrefix: 'contract' })
  return { store, teardown: () => store.close() }
})

// The same contract with the sweep running every few milliseconds: deleting expired records
// must change no answer, exactly as Redis dropping a key at its PEXPIREAT changes none.
describeStoreContract('memory with a fast sweep', async () => {
  const store = memoryStore({ keyPrefix: 'contract', sweepIntervalMs: 5 })
  return { store, teardown: () => store.close() }
})
