import { memoryStore } from '../../src/stores/memory/index.js'
import { describeStoreContract } from './store-contract.js'

describeStoreContract('memory', async () => {
  const store = memoryStore({ keyPrefix: 'contract' })
  return { store, teardown: () => store.close() }
})
