/**
 * What `idemkit` reads and prints: its options and usage text, durations for people, and one
 * scope's inspection.
 */
import type { Inspection, RecordSummary } from './inspect.js'

/** Options of one `parseArgs` type, by name: `{ name: { type } }` for each, typed as written. */
function options<const T extends 'string' | 'boolean', const N extends string>(
  type: T,
  ...names: N[]
): { readonly [K in N]: { readonly type: T } } {
  return Object.fromEntries(names.map((name) => [name, { type }])) as { readonly [K in N]: { readonly type: T } }
}

/** The options `parseArgs` reads (cli.ts), as USAGE below lists them. */
export const OPTIONS = {
  ...options(
    'string',
    'store',
    'principal',
    'key',
    'principal-file',
    'key-file',
    'operation',
    'digest',
    'key-prefix',
    'schema',
    'table',
    'secrets-file',
    'as',
    'status',
    'body-file',
    'content-type',
    'retain-ms',
    'actor',
    'reason',
    'state',
    'older-than',
    'limit',
  ),
  ...options('boolean', 'json', 'delete', 'force', 'check'),
  help: { type: 'boolean', short: 'h' },
} as const

export const USAGE = `Usage: idemkit inspect --store <url> --principal <principal> --key <key> --operation '<METHOD /route>' [options]
       idemkit inspect --store <url> --digest <hex as list prints it> [--json]
       idemkit resolve (--as retryable | --as completed --status <n> --body-file <f> | --delete) <the same> [options]
       idemkit list --store <url> [--state <STATE>] [--older-than <10m>] [--limit <n>] [--json]
       idemkit stats --store <url> [--json]
       idemkit migrate --store <postgres url> [--check] [--schema <name>] [--table <name>]

inspect finds the record of one request scope: the store holds only HMAC digests, so the digest
is computed under every secret version and each record read as stored, with the store's clock.
resolve changes a stuck record (ABANDONED, or an execution whose lease ran out): retryable (the
next retry runs the handler), completed with the answer given (the next retry replays it), or
deleted (the key is new again). A compare-and-set on the record as read; one audit line (JSON)
goes to stderr. list shows live records (by state, unchanged for at least --older-than), stats
counts them by state and operation code; both scan the store (SCAN on Redis, every master of a
Cluster; keyset pages on PostgreSQL), with a progress line on a terminal.

Options:
  --store <url>          redis://host:port[/db] or postgres://user@host:port/db; better in the
                         IDEMKIT_STORE environment variable (a password on the command line is
                         seen in shell history and process lists: idemkit warns)
  --principal <p>        who owns the key, as the app's principal function returns it
  --key <k>              the Idempotency-Key header's value
  --principal-file <f>, --key-file <f>   the same, read from a file (- for stdin), so they stay
                         out of shell history and process lists; one trailing newline is dropped
  --operation <op>       the operation's name; a route's default is "METHOD /route/pattern"
  --digest <hex>         inspect, resolve: the record list printed (its scope digest, 12 hex
                         characters or more), found by a scan, in place of principal, key and operation
  --key-prefix <prefix>  the store's keyPrefix (default idemkit)
  --schema <name>        the PostgreSQL store's schema (default public)
  --table <name>         the PostgreSQL store's table (default idemkit_records)
  --secrets-file <file>  JSON { "current": 2, "keys": { "1": "...", "2": "..." } }; without it,
                         IDEMPOTENCY_SECRET is version 1. Secrets are never taken from arguments.
  --json                 the inspection as JSON
  --as <retryable|completed>, --delete   what resolve makes of the record
  --status <n>, --body-file <f>, --content-type <t>   the answer of --as completed
                         (content type default application/json)
  --retain-ms <ms>       how long the resolved record lives or replays (default 86400000)
  --force                also resolve a running execution (lease not run out) or a completed record;
                         needs --reason. The record gets an owner and attempt of its own, so a
                         holder still running cannot record its answer (it answers 503)
  --reason <text>        why, kept in the record and the audit line (required with --force)
  --actor <name>         who resolves, kept in the record and the audit line (default
                         $IDEMKIT_ACTOR, else $USER or $LOGNAME; resolve refuses to run without one)
  --state <STATE>        list: CLAIMED, EXECUTING, COMPLETED, FAILED_RETRYABLE or ABANDONED
  --older-than <d>       list: unchanged for at least this long: 500ms, 30s, 10m, 2h, 1d
  --limit <n>            list: at most this many records (default 1000); list says when it
                         stopped there before the end of the store
  --check                migrate: change nothing; exit 0 when the PostgreSQL schema is at this
                         version, 5 when it is behind (run idemkit migrate, or the SQL files)
  -h, --help             this text

Exit codes: 0 found (inspect) or resolved; 1 no record under any secret version; 2 bad
arguments; 3 the store could not be read or written; 4 resolve refused (running or completed
without --force, or the record changed since it was read); 5 migrate --check: schema behind.`

/** A duration for people: 850 ms, 12.3 s, 4 min 10 s, 23 h 59 min, 3 d 2 h. */
export function human(ms: number): string {
  if (ms < 1_000) return `${Math.round(ms)} ms`
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1)} s`
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ${Math.floor((ms % 60_000) / 1_000)} s`
  if (ms < 86_400_000) return `${Math.floor(ms / 3_600_000)} h ${Math.floor((ms % 3_600_000) / 60_000)} min`
  return `${Math.floor(ms / 86_400_000)} d ${Math.floor((ms % 86_400_000) / 3_600_000)} h`
}

function describeRecord(record: RecordSummary): string[] {
  const lines = [
    `  state     ${record.state}${record.expired ? ' (expired: reads as absent; a new request runs)' : ''}`,
    `  attempt   ${record.attempt} (rev ${record.rev}), owner ${record.owner}…`,
    `  created   ${human(record.ageMs)} ago; last changed ${human(record.updatedMsAgo)} ago`,
  ]
  if (record.state === 'CLAIMED' || record.state === 'EXECUTING') {
    lines.push(`  lease     ${record.leaseLeftMs > 0 ? `${human(record.leaseLeftMs)} left` : 'ran out'}`)
  }
  if (record.replayLeftMs !== undefined) lines.push(`  replays   for ${human(record.replayLeftMs)}`)
  lines.push(`  expires   ${record.expired ? 'already' : `in ${human(record.expiresInMs)}`}`)
  if (record.response !== undefined) {
    lines.push(`  response  ${record.response.status ?? '?'}, ${record.response.bytes} bytes`)
  }
  if (record.state === 'FAILED_RETRYABLE' || record.state === 'ABANDONED') {
    const { cause } = record
    lines.push(
      cause === undefined
        ? '  cause     not kept (failed by an earlier idemkit version, or by a store that keeps none)'
        : `  cause     ${cause.class}${cause.message === undefined ? "; a handler's message is not kept (it may carry the request's data)" : `: ${cause.message}`}`,
    )
  }
  lines.push(`  stored    operation ${record.operation}, codec ${record.codec}, policy ${record.policy}`)
  const resolved = record.resolution
  if (resolved !== undefined) {
    lines.push(
      `  resolved  by ${resolved.by} at ${resolved.at}, from ${resolved.from}${resolved.forced ? ' (forced)' : ''}, ` +
        `attempt ${resolved.fencedAttempt} fenced off${resolved.reason === '' ? '' : `: ${resolved.reason}`}`,
    )
  }
  return lines
}

export function print(inspection: Inspection): string {
  const lines: string[] = []
  for (const version of inspection.versions) {
    const head = `${inspection.operation}: scope digest ${version.digest} (secret version ${version.version}${version.current ? ', current' : ''})`
    if (version.record === undefined) {
      lines.push(`${head}: no record`)
      continue
    }
    lines.push(head, ...describeRecord(version.record))
  }
  return `${lines.join('\n')}\n`
}
