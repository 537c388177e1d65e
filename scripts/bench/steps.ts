/**
 * What a derived key and a recovery point cost, measured on the PostgreSQL store's own calls
 * (no HTTP): `keyFor(name)` of a new name (an HMAC of the secret, the scope digest and the name;
 * client CPU), and a first execution of a `transaction: true` run with no step and with one step
 * that writes nothing of its own (its point looked up, written fenced, COMMIT and the next
 * BEGIN), beside the plain first execution (claim + complete). The difference between the
 * transaction's rows is what a step costs. Used by `npm run bench` (run.ts, after the HTTP
 * rounds, on the same PostgreSQL cluster) and by `npm run bench:postgres` (postgres-calls.ts).
 */
import { randomBytes } from 'node:crypto'
import type { ClaimRequest, IdempotencyStore, RecordTimes, TransactionalStore } from '../../src/index.js'
import { median, postgresCpuUs } from './common.js'

type Core = typeof import('../../src/index.js')

export const TIMES: RecordTimes = { leaseMs: 30_000, failureRetentionMs: 60_000, replayWindowMs: 86_400_000 }
export const RESPONSE = Buffer.alloc(100, 7)

const owner = () => randomBytes(32).toString('hex')

/** A claim of a new key, as the layer makes it for `POST /orders`. */
export const claimOf = (key: string): ClaimRequest => ({
  key,
  owner: owner(),
  fingerprint: 'f1:bench',
  operation: 'POST /orders',
  codec: 'http-2',
  policy: '1',
  start: true,
  expiredExecution: 'recover',
  ...TIMES,
})

/** A first execution without a transaction: the store's claim, then its completion. */
export async function firstExecution(core: Core, store: IdempotencyStore, key: string): Promise<void> {
  const request = claimOf(key)
  const claim = await store.claim(request)
  if (claim.kind !== core.ClaimReply.ACQUIRED) throw new Error(`claim answered ${claim.kind}`)
  await store.complete({ key, owner: request.owner, attempt: claim.attempt, rev: claim.rev }, RESPONSE, TIMES)
}

/** A first execution in a transaction of the store's, with `steps` steps that write nothing of their own. */
export async function transactional(core: Core, store: IdempotencyStore, key: string, steps: number): Promise<void> {
  const request = claimOf(key)
  const claim = await store.claim(request)
  if (claim.kind !== core.ClaimReply.ACQUIRED) throw new Error(`claim answered ${claim.kind}`)
  const ref = { key: request.key, owner: request.owner, attempt: claim.attempt, rev: claim.rev }
  const transaction = await (store as unknown as TransactionalStore).beginTransaction(ref, TIMES)
  if (!core.keepsSteps(transaction)) throw new Error('the store keeps no recovery points')
  for (let step = 0; step < steps; step++) {
    const name = `step-${step}`
    const point = await transaction.openStep(ref, name)
    if (point.committed) throw new Error('a new key has no points')
    const done = await transaction.commitStep(ref, name, '{"ok":true}')
    if (done.kind !== core.TransitionReply.OK) throw new Error(`step answered ${done.kind}`)
  }
  const done = await transaction.commit(ref, RESPONSE, TIMES)
  if (done.kind !== core.TransitionReply.OK) throw new Error(`commit answered ${done.kind}`)
}

/** µs per `keyFor(name)` of a new name (the HMAC of the secret, the scope digest and the name), the median of 5 runs. */
export function keyForMicros(core: Core): number {
  const secrets = core.parseSecrets({ current: 1, keys: { 1: 's'.repeat(32) } })
  const digest = 'a'.repeat(64)
  const runs: number[] = []
  for (let run = 0; run < 5; run++) {
    const started = performance.now()
    for (let i = 0; i < 20_000; i++) core.derivedKey(secrets, 1, digest, `charge:${i}`)
    runs.push(((performance.now() - started) * 1000) / 20_000)
  }
  return median(runs)
}

export interface StepCosts {
  keyForUs: number
  /** Per case: one [ops/s, PostgreSQL CPU µs/op, client CPU µs/op] per round. */
  rows: Map<string, number[][]>
}

/**
 * The three first executions (plain, in a transaction, in a transaction with one step), taking
 * turns round by round on `store` at `concurrency`, `operations` of each in all.
 */
export async function stepCosts(
  core: Core,
  store: IdempotencyStore,
  postgresPid: number,
  options: { operations: number; rounds: number; concurrency: number },
): Promise<StepCosts> {
  const tag = randomBytes(4).toString('hex')
  const cases: readonly [string, (key: string) => Promise<void>][] = [
    ['claim + complete', (key) => firstExecution(core, store, key)],
    ['claim + transaction + complete', (key) => transactional(core, store, key, 0)],
    ['claim + transaction + 1 step + complete', (key) => transactional(core, store, key, 1)],
  ]
  let next = 0
  const key = () => `bench:idem:1:d1:op:${tag}-steps-${next++}`
  // Warm: each case's statements prepared on the pool's connections.
  for (let i = 0; i < 200; i++) for (const [, run] of cases) await run(key())
  const rows = new Map<string, number[][]>()
  const perRound = Math.ceil(options.operations / options.rounds)
  for (let round = 0; round < options.rounds; round++) {
    for (const [name, run] of cases) {
      let left = perRound
      const postgres0 = postgresCpuUs(postgresPid)
      const client0 = process.cpuUsage()
      const started = performance.now()
      await Promise.all(
        Array.from({ length: options.concurrency }, async () => {
          while (left-- > 0) await run(key())
        }),
      )
      const seconds = (performance.now() - started) / 1000
      const client = process.cpuUsage(client0)
      const postgres = postgresCpuUs(postgresPid) - postgres0
      const row = [perRound / seconds, postgres / perRound, (client.user + client.system) / perRound]
      rows.set(name, [...(rows.get(name) ?? []), row])
    }
  }
  return { keyForUs: keyForMicros(core), rows }
}

/** `median (lowest-highest)` of the rounds, or the one value. */
export function roundsFigure(values: readonly number[], digits = 0): string {
  const f = (n: number) => n.toFixed(digits)
  return values.length === 1
    ? f(values[0] as number)
    : `${f(median(values))} (${f(Math.min(...values))}-${f(Math.max(...values))})`
}
