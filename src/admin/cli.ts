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

import {
  ConnectError,
  causeOf,
  type OpenStore,
  openStore,
  SetupError,
  StoreError,
  storeUrl,
  UsageError,
} from './cli-store.js'
import { human, OPTIONS, print, USAGE } from './cli-text.js'
import { type Inspection, inspectScope, summarise } from './inspect.js'
import { findByDigest, listRecords, recordStats } from './list.js'
import { resolutionOf } from './resolution.js'
import { type Resolution, resolveRecord, resolveScope } from './resolve.js'

function secretsFrom(file: string | undefined, env: NodeJS.ProcessEnv): Secrets {
  if (file !== undefined) {
    let text: string
    try {
      text = readFileSync(file, 'utf8')
    } catch (error) {
      throw new SetupError(`cannot read --secrets-file ${file}: ${(error as Error).message}`)
    }
    try {
      return parseSecrets(JSON.parse(text))
    } catch (error) {
      throw new SetupError(`--secrets-file ${file}: ${(error as Error).message}`)
    }
  }
  const secret = env.IDEMPOTENCY_SECRET
  if (!secret) {
    throw new SetupError(
      "set IDEMPOTENCY_SECRET, or pass --secrets-file (IDEMPOTENCY_SECRET is the app's secret, version 1; the file holds every version)",
    )
  }
  try {
    return parseSecrets({ current: 1, keys: { 1: secret } })
  } catch (error) {
    throw new SetupError(`IDEMPOTENCY_SECRET: ${(error as Error).message}`)
  }
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
          `operation ${stats.operationNames[code] ?? '?'} (${code}): ${Object.entries(states)
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

/**
 * inspect and resolve of the record `list` printed: `--digest` (its 12 hex characters, or more),
 * found by a scan, with no principal, key or secret.
 */
async function byDigest(
  open: OpenStore,
  values: Record<string, unknown>,
  resolution: Resolution | undefined,
  actor: string | undefined,
): Promise<number> {
  const digest = values.digest as string
  if (!/^[0-9a-f]{8,64}$/i.test(digest)) {
    throw new UsageError(`--digest must be the scope digest's hex characters as list prints them, not ${digest}`)
  }
  for (const name of ['principal', 'key', 'operation', 'principal-file', 'key-file']) {
    if (values[name] !== undefined)
      throw new UsageError(`pass --digest or --principal, --key and --operation, not both`)
  }
  let found: Awaited<ReturnType<typeof findByDigest>>
  try {
    found = await findByDigest(open.store, digest)
  } catch (error) {
    throw new StoreError(open.where, error)
  }
  if (found.length === 0) {
    process.stdout.write(`no record with scope digest ${digest}\n`)
    return 1
  }
  if (found.length > 1)
    throw new SetupError(`${found.length} records have a scope digest starting ${digest}: give more of it`)
  const record = found[0] as (typeof found)[number]
  const operation = resolutionOf(record.record.op).operation
  if (resolution !== undefined) {
    const audit = await resolveRecord({ store: open.store, resolution, ...resolveOptions(values), actor }, record)
    process.stderr.write(`${JSON.stringify(audit)}\n`)
    process.stdout.write(`${audit.operation}: scope digest ${audit.digest}: ${audit.from} -> ${audit.to}\n`)
    return 0
  }
  const inspection: Inspection = {
    operation,
    versions: [{ ...record, current: false, record: summarise(record.record, record.now) }],
    now: record.now,
  }
  process.stdout.write(values.json === true ? `${JSON.stringify(inspection, null, 2)}\n` : print(inspection))
  return 0
}

/** resolve's --force, --retain-ms and --reason. */
function resolveOptions(values: Record<string, unknown>): { force: boolean; retainMs?: number; reason?: string } {
  const retain = values['retain-ms']
  const retainMs = retain === undefined ? undefined : Number(retain)
  if (retainMs !== undefined && (!Number.isSafeInteger(retainMs) || retainMs < 1)) {
    throw new UsageError('--retain-ms must be a positive whole number of milliseconds')
  }
  return { force: values.force === true, retainMs, reason: values.reason as string | undefined }
}

/**
 * Who resolves, for the audit line and the record: --actor, else IDEMKIT_ACTOR, else the login
 * name (USER, LOGNAME); never a made-up one.
 */
function actorOf(values: Record<string, unknown>, env: NodeJS.ProcessEnv): string {
  const actor = (values.actor as string | undefined) || env.IDEMKIT_ACTOR || env.USER || env.LOGNAME
  if (actor) return actor
  throw new SetupError(
    'resolve records who changed the record: pass --actor <name>, or set IDEMKIT_ACTOR (USER and LOGNAME are not set either)',
  )
}

/** After "no record": an operation without its method is the usual slip (`/payments` for `POST /payments`). */
function noRecordHint(operation: string): void {
  if (!/^\//.test(operation)) return
  process.stderr.write(
    `idemkit: the operation "${operation}" has no method: a route's default operation is "METHOD /route/pattern", ` +
      `e.g. --operation 'POST ${operation}' (idemkit stats lists the operations the store holds)\n`,
  )
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
    if (values.digest !== undefined) {
      const actor = resolution === undefined ? undefined : actorOf(values, env)
      open = await openStore(url, values)
      return await byDigest(open, values, resolution, actor)
    }
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
    const actor = resolution === undefined ? undefined : actorOf(values, env)
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
      const audit = await resolveScope({ ...scope, resolution, ...resolveOptions(values), actor })
      if (audit === undefined) {
        process.stdout.write(`${values.operation}: no record under any secret version\n`)
        noRecordHint(values.operation as string)
        return 1
      }
      process.stderr.write(`${JSON.stringify(audit)}\n`)
      process.stdout.write(`${audit.operation}: scope digest ${audit.digest}: ${audit.from} -> ${audit.to}\n`)
      return 0
    }
    const inspection = await inspectScope(scope)
    process.stdout.write(values.json === true ? `${JSON.stringify(inspection, null, 2)}\n` : print(inspection))
    if (inspection.versions.some((version) => version.record !== undefined)) return 0
    noRecordHint(values.operation as string)
    return 1
  } catch (error) {
    if (error instanceof SetupError) {
      process.stderr.write(`idemkit: ${error.message}\n`)
      return 2
    }
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
