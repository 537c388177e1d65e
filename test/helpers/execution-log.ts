/**
 * The fault suite's execution counter, outside the system under test: the test app appends one
 * JSON line per handler execution (and per sink write and fired signal) to a file the test
 * reads back. A SIGKILLed app keeps every line it wrote.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface LogEntry {
  readonly type: 'execution' | 'sink' | 'signal' | 'written' | 'committed' | 'charge-written'
  readonly route?: string
  /** The raw Idempotency-Key header value the handler saw. */
  readonly key?: string
  /** The request's X-Case header, when the test sent one. */
  readonly case?: string
  readonly user: string
  readonly pid: number
  readonly token: number
  readonly accepted?: boolean
  readonly aborted?: boolean
}

export interface ExecutionLog {
  readonly path: string
  entries(): LogEntry[]
  /** Handler executions, optionally only those matching `filter`. */
  executions(filter?: (entry: LogEntry) => boolean): LogEntry[]
  /** Executions per `user/key`. */
  countsByScope(): Map<string, number>
  remove(): void
}

export function createExecutionLog(): ExecutionLog {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-executions-'))
  const path = join(dir, 'executions.jsonl')
  const entries = (): LogEntry[] => {
    if (!existsSync(path)) return []
    const text = readFileSync(path, 'utf8')
    // Whole lines only: an app may be appending one while the test polls the file.
    return text
      .slice(0, text.lastIndexOf('\n') + 1)
      .split('\n')
      .filter((line) => line.length > 0)
      .map((line) => JSON.parse(line) as LogEntry)
  }
  const executions = (filter: (entry: LogEntry) => boolean = () => true) =>
    entries().filter((entry) => entry.type === 'execution' && filter(entry))
  return {
    path,
    entries,
    executions,
    countsByScope() {
      const counts = new Map<string, number>()
      for (const entry of executions()) {
        const scope = `${entry.user}/${entry.key}`
        counts.set(scope, (counts.get(scope) ?? 0) + 1)
      }
      return counts
    },
    remove() {
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
