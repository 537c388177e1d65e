/**
 * `idemkit/bullmq`: a BullMQ processor whose handler runs at most once per key (docs/jobs.md).
 * The only entry that imports `bullmq`, an optional peer dependency.
 */

export type { IdempotentJobHandler, IdempotentProcessorOptions } from './processor.js'
export { idempotentProcessor } from './processor.js'
