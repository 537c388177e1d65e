/**
 * An operator's resolution as the record keeps it (`idemkit resolve`): who, when and why, after
 * the operation's name in the record's `op` text, so every store keeps it with no change of
 * record layout until the record is next taken over by a new execution.
 */
import type { RecordState } from '../core/record.js'

/** Who resolved a record, when and why, as the record keeps it. */
export interface RecordResolution {
  readonly by: string
  /** ISO 8601, by the store's clock. */
  readonly at: string
  readonly reason: string
  readonly from: RecordState
  readonly forced: boolean
  /** The attempt the operator's resolution fenced off (the resolved record's is one more). */
  readonly fencedAttempt: number
}

/** What separates the operation's name from the resolution in a record's `op` text. */
export const RESOLUTION_MARK = '\n#resolved '

/**
 * A stored `op` text read back: the operation's name and, on a record an operator resolved,
 * who, when and why.
 */
export function resolutionOf(op: string): { operation: string; resolution: RecordResolution | undefined } {
  const at = op.lastIndexOf(RESOLUTION_MARK)
  if (at < 0) return { operation: op, resolution: undefined }
  try {
    const resolution = JSON.parse(op.slice(at + RESOLUTION_MARK.length)) as RecordResolution
    return { operation: op.slice(0, at), resolution }
  } catch {
    return { operation: op, resolution: undefined }
  }
}
