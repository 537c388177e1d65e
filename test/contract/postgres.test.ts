import { describeStoreContract } from '../../src/testing/index.js'
import { createPostgresStore } from '../helpers/stores.js'

// The suite's own cluster (test/setup/postgres.ts), the table migrated once for the run.
describeStoreContract(() => createPostgresStore(), { name: 'postgres' })
