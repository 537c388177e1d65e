/** `idemkit/admin`: what an operator needs to find a scope's record (the `idemkit` command uses it). */
export {
  type InspectedVersion,
  type InspectInput,
  type Inspection,
  inspectScope,
  type RecordSummary,
} from './inspect.js'
export { type AuditLine, type Resolution, type ResolveInput, resolveScope } from './resolve.js'
