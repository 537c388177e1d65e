/**
 * What the nemesis run (run.ts) reads from its store deployment besides the apps' answers: on
 * Sentinel which node is master as it changes; after the probes each key's record as the store
 * holds it (what `idemkit inspect` reads) and, on PostgreSQL, the deposits' rows.
 */
import pg from 'pg'
import { parseSecrets, scopeDigest } from '../../src/core/scope.js'
import type { IdempotencyStore } from '../../src/core/store.js'
import { operationCode, storeKey } from '../../src/core/store-key.js'
import { identity } from './checker.js'
import type { Deployment } from './deployments/index.js'
import type { BalanceRow, DepositRow, ResumeOrderRow } from './history.js'
import { type SentKey, sleep } from './traffic.js'

/** A key's record after the probes, as the store holds it. */
export interface FinalRecord {
  readonly state: string
  readonly attempt?: number
  readonly rev?: number
  readonly owner?: string
  readonly leaseLeftMs?: number
}

/**
 * Watches which node is master, by the deployment's own account, every 250 ms while the load
 * runs (on Sentinel; nothing elsewhere); `stop()` resolves to each change, as JSON lines.
 */
export function watchRoles(deployment: Deployment, now: () => number): { stop(): Promise<string[]> } {
  let watching = deployment.roles !== undefined
  const roles: string[] = []
  const watch = async () => {
    let last = ''
    while (watching && deployment.roles !== undefined) {
      const state = await deployment.roles()
      if (state !== last) roles.push(JSON.stringify({ at: now(), state }))
      last = state
      await sleep(250)
    }
  }
  const watcher = watch()
  return {
    async stop() {
      watching = false
      await watcher
      return roles
    },
  }
}

/** Every key's record as the store holds it now (what `idemkit inspect` reads). */
export async function readRecords(
  deployment: Deployment,
  keys: readonly SentKey[],
  secret: string,
): Promise<Record<string, FinalRecord>> {
  const records: Record<string, FinalRecord> = {}
  const secrets = parseSecrets({ current: 1, keys: { 1: secret } })
  const { store: reader, close } = await deployment.reader()
  for (const { user, key, route } of keys) {
    const operation = `POST ${route}`
    const digest = scopeDigest(secrets, 1, { principal: user, key, operation })
    const { record, now: at } = await (reader.read as NonNullable<IdempotencyStore['read']>)(
      storeKey('idemkit', 1, operationCode(operation), digest),
    )
    records[identity(user, key)] =
      record === undefined
        ? { state: 'absent' }
        : {
            state: record.state,
            attempt: record.attempt,
            rev: record.rev,
            owner: record.owner.slice(0, 8),
            leaseLeftMs: Math.max(0, record.leaseUntil - at),
          }
  }
  await close()
  return records
}

/** The deposits' rows, the balances and `/resumes`'s order rows, where the deployment keeps them (PostgreSQL). */
export async function readDeposits(
  deployment: Deployment,
): Promise<{ deposits?: DepositRow[]; balances?: BalanceRow[]; resumeOrders?: ResumeOrderRow[] }> {
  const databaseUrl = deployment.databaseUrl()
  if (databaseUrl === undefined) return {}
  const admin = new pg.Client({ connectionString: databaseUrl })
  await admin.connect()
  const deposits = (await admin.query<DepositRow>('SELECT key, principal, account, amount FROM nemesis_deposits')).rows
  const balances = (await admin.query<BalanceRow>('SELECT account, balance::int AS balance FROM nemesis_balances')).rows
  const resumeOrders = (await admin.query<ResumeOrderRow>('SELECT key, principal, charge FROM nemesis_resume_orders'))
    .rows
  await admin.end()
  return { deposits, balances, resumeOrders }
}
