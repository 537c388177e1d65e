/**
 * `idemkit/testing`: the store contract suite for vitest, so a store of your own can show it
 * keeps the same rules as the Redis, PostgreSQL and memory stores (docs/writing-a-store.md).
 */
export {
  claimRequest,
  describeStoreContract,
  type StoreContractOptions,
  type StoreHarness,
} from './store-contract.js'
