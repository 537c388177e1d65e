#!/usr/bin/env node
/**
 * `idemkit`, the operator's command: `idemkit inspect` finds the record of one request scope in
 * Redis or PostgreSQL from what the operator knows (principal, key, operation). Secrets come
 * from the environment or a file, never from the command line (it would land in shell history
 * and process lists). Bad arguments print the usage and exit 2, never a stack trace.
 */
import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { IdempotencyError } from '../core/errors.js'
import { parseSecrets, type Secrets } from '../core/scope.js'
import type { IdempotencyStore } from '../core/store.js'
import { type Inspection, inspectScope, type RecordSummary } from './inspect.js'
import { listRecords, recordStats } from './list.js'
import { type Resolution, resolveScope } from './resolve.js'

const USAGE = `Usage: idemkit inspect --store <url> --principal <principal> --key <key> --operation '<METHOD /route>' [options]
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
  --actor <name>         who resolves, kept in the record and the audit line (default $USER)
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

class UsageError extends Error {}

const OPTIONS = {
  store: { type: 'string' },
  principal: { type: 'string' },
  key: { type: 'string' },
  'principal-file': { type: 'string' },
  'key-file': { type: 'string' },
  operation: { type: 'string' },
  'key-prefix': { type: 'string' },
  schema: { type: 'string' },
  table: { type: 'string' },
  'secrets-file': { type: 'string' },
  json: { type: 'boolean' },
  as: { type: 'string' },
  delete: { type: 'boolean' },
  status: { type: 'string' },
  'body-file': { type: 'string' },
  'content-type': { type: 'string' },
  'retain-ms': { type: 'string' },
  force: { type: 'boolean' },
  actor: { type: 'string' },
  reason: { type: 'string' },
  state: { type: 'string' },
  'older-than': { type: 'string' },
  limit: { type: 'string' },
  check: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const

function secretsFrom(file: string | undefined, env: NodeJS.ProcessEnv): Secrets {
  if (file !== undefined) {
    let text: string
    try {
      text = readFileSync(file, 'utf8')
    } catch (error) {
      throw new UsageError(`cannot read --secrets-file ${file}: ${(error as Error).message}`)
    }
    try {
      return parseSecrets(JSON.parse(text))
    } catch (error) {
      throw new UsageError(`--secrets-file ${file}: ${(error as Error).message}`)
    }
  }
  const secret = env.IDEMPOTENCY_SECRET
  if (!secret) throw new UsageError('set IDEMPOTENCY_SECRET, or pass --secrets-file')
  try {
    return parseSecrets({ current: 1, keys: { 1: secret } })
  } catch (error) {
    throw new UsageError(`IDEMPOTENCY_SECRET: ${(error as Error).message}`)
  }
}

interface OpenStore {
  readonly store: IdempotencyStore
  /** The server, for messages: `redis 127.0.0.1:6380/2`, `postgres 127.0.0.1:5432/app`. */
  readonly where: string
  close(): Promise<void>
}

/** The store could not be reached: the server, and why. */
class ConnectError extends Error {}

/** `host:port/db` of a store URL, never its user or password. */
function serverOf(url: URL, defaultPort: number, defaultDb: string): string {
  const db = decodeURIComponent(url.pathname.slice(1)) || defaultDb
  return `${url.hostname || '127.0.0.1'}:${url.port || defaultPort}/${db}`
}

function causeOf(error: unknown): string {
  const { message, code } = error as { message?: string; code?: string }
  const nested = (error as { cause?: unknown }).cause
  const own = message || code || String(error)
  return nested === undefined ? own : `${own} (${causeOf(nested)})`
}

async function openStore(url: string, values: Record<string, unknown>): Promise<OpenStore> {
  const keyPrefix = values['key-prefix'] as string | undefined
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    throw new UsageError(`--store is not a URL: ${url.replace(/\/\/[^@/]*@/, '//…@')}`)
  }
  const scheme = parsed.protocol
  if (scheme === 'redis:' || scheme === 'rediss:') {
    const { Redis } = await import('ioredis')
    const { redisStore } = await import('../stores/redis/index.js')
    const { databaseRefusal } = await import('../stores/redis/server-check.js')
    const where = `redis ${serverOf(parsed, 6379, '0')}`
    const redis = new Redis(url, {
      commandTimeout: 5_000,
      connectTimeout: 5_000,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      lazyConnect: true,
    })
    let lastError: unknown
    redis.on('error', (error: unknown) => {
      lastError = error
    })
    try {
      await redis.connect()
    } catch (error) {
      redis.disconnect()
      throw new ConnectError(`cannot connect to ${where}: ${causeOf(lastError ?? error)}`)
    }
    // A database the server does not have: ioredis reports the refused SELECT as an error event
    // and goes on in database 0, which must not be read or changed in its place.
    const wrongDatabase = await databaseRefusal(redis).catch((error: unknown) => {
      redis.disconnect()
      throw new ConnectError(`cannot use ${where}: ${causeOf(error)}`)
    })
    if (wrongDatabase !== undefined) {
      redis.disconnect()
      throw new ConnectError(`cannot use ${where}: ${wrongDatabase.message}`)
    }
    const store = redisStore({ redis, keyPrefix, onEvent: () => undefined })
    return {
      store,
      where,
      async close() {
        await store.close()
        redis.disconnect()
      },
    }
  }
  if (scheme === 'postgres:' || scheme === 'postgresql:') {
    const { default: pg } = await import('pg')
    const { postgresStore } = await import('../stores/postgres/index.js')
    const pool = new pg.Pool({ connectionString: url, max: 1, connectionTimeoutMillis: 5_000 })
    pool.on('error', () => undefined)
    const where = `postgres ${serverOf(parsed, 5432, decodeURIComponent(parsed.username) || 'postgres')}`
    try {
      ;(await pool.connect()).release()
    } catch (error) {
      await pool.end().catch(() => undefined)
      throw new ConnectError(`cannot connect to ${where}: ${causeOf(error)}`)
    }
    const store = postgresStore({
      pool,
      keyPrefix,
      schema: values.schema as string | undefined,
      table: values.table as string | undefined,
      sweepIntervalMs: 0,
      acquireTimeoutMs: 5_000,
    })
    return {
      store,
      where,
      async close() {
        await store.close()
        await pool.end()
      },
    }
  }
  throw new UsageError(`--store must be a redis:// or postgres:// URL, not ${scheme}`)
}

/** A duration for people: 850 ms, 12.3 s, 4 min 10 s, 23 h 59 min, 3 d 2 h. */
function human(ms: number): string {
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

function print(inspection: Inspection): string {
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

const STATES = ['CLAIMED', 'EXECUTING', 'COMPLETED', 'FAILED_RETRYABLE', 'ABANDONED'] as const
const UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }

function duration(text: string): number {
  const match = /^(\d+)(ms|s|m|h|d)$/.exec(text)
  if (match === null) throw new UsageError(`--older-than must be like 500ms, 30s, 10m, 2h or 1d, not ${text}`)
  return Number(match[1]) * (UNITS[match[2] as string] as number)
}

/** list and stats: a scan, with a progress line on a terminal. */
async function scan(
  command: 'list' | 'stats',
  values: Record<string, unknown>,
  env: NodeJS.ProcessEnv,
): Promise<number> {
  const url = storeUrl(values, env)
  const state = values.state as string | undefined
  if (state !== undefined && !(STATES as readonly string[]).includes(state)) {
    throw new UsageError(`--state must be one of ${STATES.join(', ')}`)
  }
  const olderThanMs = values['older-than'] === undefined ? undefined : duration(values['older-than'] as string)
  const limit = values.limit === undefined ? undefined : Number(values.limit)
  if (limit !== undefined && (!Number.isSafeInteger(limit) || limit < 1))
    throw new UsageError('--limit must be a positive whole number')
  const onProgress = process.stderr.isTTY ? (n: number) => process.stderr.write(`\rscanned ${n} records`) : undefined
  const open = await openStore(url, values)
  try {
    return await scanWith(open, command, values, state, olderThanMs, limit, onProgress)
  } catch (error) {
    throw new StoreError(open.where, error)
  } finally {
    await open.close().catch(() => undefined)
  }
}

async function scanWith(
  open: OpenStore,
  command: 'list' | 'stats',
  values: Record<string, unknown>,
  state: string | undefined,
  olderThanMs: number | undefined,
  limit: number | undefined,
  onProgress: ((n: number) => void) | undefined,
): Promise<number> {
  if (command === 'stats') {
    const stats = await recordStats({ store: open.store, onProgress })
    if (onProgress) process.stderr.write('\n')
    if (values.json === true) {
      process.stdout.write(`${JSON.stringify(stats, null, 2)}\n`)
    } else {
      const lines = [`${stats.scanned} records scanned, ${stats.expired} expired (read as absent, not yet removed)`]
      for (const [name, count] of Object.entries(stats.byState)) lines.push(`  ${name.padEnd(17)} ${count}`)
      for (const [code, states] of Object.entries(stats.byOperation)) {
        lines.push(
          `operation ${code}: ${Object.entries(states)
            .map(([name, count]) => `${name} ${count}`)
            .join(', ')}`,
        )
      }
      process.stdout.write(`${lines.join('\n')}\n`)
    }
    return 0
  }
  const { records, scanned, complete } = await listRecords({
    store: open.store,
    state: state as (typeof STATES)[number] | undefined,
    olderThanMs,
    limit,
    onProgress,
  })
  if (onProgress) process.stderr.write('\n')
  if (values.json === true) {
    process.stdout.write(`${JSON.stringify({ scanned, complete, records }, null, 2)}\n`)
  } else {
    const lines = records.map(
      (record) =>
        `${record.operationCode} ${record.digest}  ${record.state.padEnd(16)} attempt ${record.attempt}  ` +
        `changed ${human(record.updatedMsAgo)} ago  ${record.operation}`,
    )
    lines.push(
      complete
        ? `${records.length} of ${scanned} records scanned`
        : `${records.length} shown, the --limit: the scan stopped after ${scanned} records, before the end of the ` +
            'store; more may match. Pass a larger --limit, or narrow it with --state or --older-than.',
    )
    process.stdout.write(`${lines.join('\n')}\n`)
  }
  return 0
}

/** A store call that failed once the store was reached: the server it failed on, and why. */
class StoreError extends Error {
  constructor(where: string, error: unknown) {
    super(`${where}: ${causeOf(error)}`, { cause: error })
  }
}

/** The store's URL: --store, else IDEMKIT_STORE; a warning when a password is on the command line. */
function storeUrl(values: Record<string, unknown>, env: NodeJS.ProcessEnv): string {
  const url = (values.store as string | undefined) ?? env.IDEMKIT_STORE
  if (url === undefined || url === '') throw new UsageError('--store (or IDEMKIT_STORE) is required')
  if (values.store !== undefined && /^[a-z]+:\/\/[^/@]*:[^/@]+@/i.test(url)) {
    process.stderr.write(
      'idemkit: warning: the --store URL carries a password, which shell history and process lists show; ' +
        'set IDEMKIT_STORE instead.\n',
    )
  }
  return url
}

/** --key / --principal, or their -file variant (- for stdin), one trailing newline dropped. */
function valueOrFile(values: Record<string, unknown>, name: 'key' | 'principal'): string | undefined {
  const file = values[`${name}-file`] as string | undefined
  if (file === undefined) return values[name] as string | undefined
  if (values[name] !== undefined) throw new UsageError(`pass --${name} or --${name}-file, not both`)
  let text: string
  try {
    text = readFileSync(file === '-' ? 0 : file, 'utf8')
  } catch (error) {
    throw new UsageError(`cannot read --${name}-file ${file}: ${(error as Error).message}`)
  }
  return text.replace(/\r?\n$/, '')
}

/** The library's option names in a message, as the flags an operator types. */
const FLAGS: Readonly<Record<string, string>> = {
  force: '--force',
  reason: '--reason',
  retainMs: '--retain-ms',
  status: '--status',
  actor: '--actor',
  principal: '--principal',
  key: '--key',
  operation: '--operation',
}

function asTyped(message: string): string {
  return message.replace(/Option "(\w+)"|`(\w+)`/g, (whole, option?: string, quoted?: string) => {
    return FLAGS[(option ?? quoted) as string] ?? whole
  })
}

function resolutionFrom(values: Record<string, unknown>): Resolution {
  const as = values.as as string | undefined
  if ((as === undefined) === (values.delete !== true)) {
    throw new UsageError('resolve needs one of --as retryable, --as completed or --delete')
  }
  if (values.delete === true) return { as: 'deleted' }
  if (as === 'retryable') return { as: 'retryable' }
  if (as !== 'completed') throw new UsageError(`--as must be retryable or completed, not ${as}`)
  const status = Number(values.status)
  if (values.status === undefined || !Number.isInteger(status) || status < 100 || status > 599) {
    throw new UsageError('--as completed needs --status, an HTTP status from 100 to 599')
  }
  const file = values['body-file'] as string | undefined
  if (file === undefined) throw new UsageError('--as completed needs --body-file')
  let body: Buffer
  try {
    body = readFileSync(file)
  } catch (error) {
    throw new UsageError(`cannot read --body-file ${file}: ${(error as Error).message}`)
  }
  return { as: 'completed', status, body, contentType: values['content-type'] as string | undefined }
}

/**
 * `idemkit migrate`: brings the PostgreSQL store's schema to this version (what
 * `store.migrate()` does); with `--check`, changes nothing and exits 5 when it is behind, for a
 * deploy pipeline's gate.
 */
async function migrate(values: Record<string, unknown>, env: NodeJS.ProcessEnv): Promise<number> {
  const url = storeUrl(values, env)
  if (!/^postgres(ql)?:/.test(url)) throw new UsageError('migrate needs a postgres:// --store')
  const open = await openStore(url, values)
  try {
    const store = open.store as import('../stores/postgres/index.js').PostgresStore
    const { POSTGRES_SCHEMA_VERSION } = await import('../stores/postgres/index.js')
    if (values.check === true) {
      const version = await store.schemaVersion()
      if (version >= POSTGRES_SCHEMA_VERSION) {
        process.stdout.write(
          `${store.table}: schema ${version}, up to date (this version needs ${POSTGRES_SCHEMA_VERSION})\n`,
        )
        return 0
      }
      process.stdout.write(
        `${store.table}: ${version === 0 ? 'not there' : `schema ${version}`}, behind: this version needs schema ` +
          `${POSTGRES_SCHEMA_VERSION}; run idemkit migrate (or apply the SQL files after ${version})\n`,
      )
      return 5
    }
    const { version } = await store.migrate()
    process.stdout.write(`${store.table}: schema ${version}\n`)
    return 0
  } finally {
    await open.close()
  }
}

async function main(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<number> {
  let parsed: ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>
  try {
    parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true })
  } catch (error) {
    process.stderr.write(`idemkit: ${(error as Error).message}\n\n${USAGE}\n`)
    return 2
  }
  const { values, positionals } = parsed
  if (values.help === true) {
    process.stdout.write(`${USAGE}\n`)
    return 0
  }
  let open: OpenStore | undefined
  try {
    const command = positionals[0]
    if (positionals.length !== 1 || !['inspect', 'resolve', 'list', 'stats', 'migrate'].includes(command as string)) {
      throw new UsageError(
        positionals.length === 0
          ? 'name a command: inspect, resolve, list, stats or migrate'
          : `unknown command: ${positionals.join(' ')}`,
      )
    }
    if (command === 'list' || command === 'stats') return await scan(command, values, env)
    if (command === 'migrate') return await migrate(values, env)
    const resolution = command === 'resolve' ? resolutionFrom(values) : undefined
    const url = storeUrl(values, env)
    const principal = valueOrFile(values, 'principal')
    const key = valueOrFile(values, 'key')
    for (const [name, value] of [
      ['principal', principal],
      ['key', key],
      ['operation', values.operation],
    ] as const) {
      if (value === undefined || value === '') throw new UsageError(`--${name} (or --${name}-file) is required`)
    }
    const secrets = secretsFrom(values['secrets-file'], env)
    open = await openStore(url, values)
    // The scope both commands look up.
    const scope = {
      store: open.store,
      secrets,
      principal: principal as string,
      key: key as string,
      operation: values.operation as string,
    }
    if (resolution !== undefined) {
      const retain = values['retain-ms']
      const retainMs = retain === undefined ? undefined : Number(retain)
      if (retainMs !== undefined && (!Number.isSafeInteger(retainMs) || retainMs < 1)) {
        throw new UsageError('--retain-ms must be a positive whole number of milliseconds')
      }
      const audit = await resolveScope({
        ...scope,
        resolution,
        force: values.force === true,
        retainMs,
        actor: values.actor ?? env.USER ?? 'unknown',
        reason: values.reason,
      })
      if (audit === undefined) {
        process.stdout.write(`${values.operation}: no record under any secret version\n`)
        return 1
      }
      process.stderr.write(`${JSON.stringify(audit)}\n`)
      process.stdout.write(`${audit.operation}: scope digest ${audit.digest}: ${audit.from} -> ${audit.to}\n`)
      return 0
    }
    const inspection = await inspectScope(scope)
    process.stdout.write(values.json === true ? `${JSON.stringify(inspection, null, 2)}\n` : print(inspection))
    return inspection.versions.some((version) => version.record !== undefined) ? 0 : 1
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`idemkit: ${error.message}\n\n${USAGE}\n`)
      return 2
    }
    if (error instanceof IdempotencyError && error.code === 'ERR_IDEM_RESOLVE_REFUSED') {
      process.stderr.write(`idemkit: refused: ${asTyped(error.message)}\n`)
      return 4
    }
    if (error instanceof IdempotencyError && error.code === 'ERR_IDEM_INVALID_OPTION') {
      process.stderr.write(`idemkit: ${asTyped(error.message)}\n\n${USAGE}\n`)
      return 2
    }
    if (error instanceof ConnectError || error instanceof StoreError) {
      process.stderr.write(`idemkit: ${error.message}\n`)
      return 3
    }
    const at = open === undefined ? 'the store' : open.where
    process.stderr.write(`idemkit: ${at} could not be read or written: ${causeOf(error)}\n`)
    return 3
  } finally {
    await open?.close().catch(() => undefined)
  }
}

main(process.argv.slice(2), process.env).then(
  (code) => {
    process.exitCode = code
  },
  (error: unknown) => {
    process.stderr.write(`idemkit: ${(error as Error).message}\n`)
    process.exitCode = 3
  },
)
