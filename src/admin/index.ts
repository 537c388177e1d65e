/** `idemkit/admin`: what an operator needs to find a scope's record (the `idemkit` command uses it). */
export {
  type FoundRecord,
  type InspectedVersion,
  type InspectInput,
  type Inspection,
  inspectScope,
  type RecordSummary,
} from './inspect.js'
export {
  findByDigest,
  type ListedRecord,
  type ListInput,
  listRecords,
  type RecordStats,
  recordStats,
  type ScanInput,
} from './list.js'
export { type RecordResolution, resolutionOf } from './resolution.js'
export {
  type AuditLine,
  type Resolution,
  type ResolveInput,
  type ResolveRecordInput,
  resolveRecord,
  resolveScope,
} from './resolve.js'
