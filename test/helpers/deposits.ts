/**
 * The fault app's deposits (test/faults/apps/fault-app.ts: POST /deposits, /deposits-plain and
 * /deposits-<orm>), as faults 19 and 23 send them.
 */
import type { AppProcess } from './app-process.js'
import type { Answer } from './fault-app.js'

export interface DepositOptions {
  readonly user: string
  readonly key: string
  readonly route?: string
  readonly holdMs?: number
  readonly holdAfterCommitMs?: number
  readonly deadlineMs?: number
  /** Also add the amount to the account's row in fault_balances (a row lock). */
  readonly balance?: string
}

/** POSTs a deposit of 10 to `account-1`; a connection reset (the app killed) is status 0. */
export async function deposit(app: AppProcess, options: DepositOptions): Promise<Answer> {
  const { user, key, route = '/deposits', holdMs, holdAfterCommitMs, deadlineMs = 30_000, balance } = options
  try {
    const response = await fetch(`${app.url}${route}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${user}`,
        'content-type': 'application/json',
        'idempotency-key': key,
        ...(holdMs ? { 'x-hold-ms': String(holdMs) } : {}),
        ...(holdAfterCommitMs ? { 'x-hold-after-commit-ms': String(holdAfterCommitMs) } : {}),
        ...(balance ? { 'x-balance': '1' } : {}),
      },
      body: JSON.stringify({ account: balance ?? 'account-1', amount: 10 }),
      signal: AbortSignal.timeout(deadlineMs),
    })
    const text = await response.text()
    const problem = (response.headers.get('content-type') ?? '').startsWith('application/problem+json')
    return {
      status: response.status,
      replayed: response.headers.get('idempotent-replayed') === 'true',
      retryAfter: response.headers.get('retry-after'),
      body: text,
      code: problem ? (JSON.parse(text) as { code?: string }).code : undefined,
    }
  } catch {
    return { status: 0, replayed: false, retryAfter: null, body: '', code: undefined }
  }
}

export const show = (a: Answer) => `${a.status}${a.replayed ? ' replay' : ''}${a.code ? ` ${a.code}` : ''}`
