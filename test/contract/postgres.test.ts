import { createPostgresStore } from '../helpers/stores.js'
import { describeStoreContract } from './store-contract.js'

// The suite's own cluster (test/setup/postgres.ts), the table migrated once for the run.
describeStoreContract('postgres', () => createPostgresStore())
