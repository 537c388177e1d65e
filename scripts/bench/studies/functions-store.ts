/**
 * `npx tsx scripts/bench/studies/functions-store.ts [--rounds n] [--calls n]`: Redis's CPU per call for
 * the store's claim through its script (a claim of a key the caller holds: REPLAYED_ACQUIRE, which
 * `SET ... NX GET` cannot answer) and its completion, sent by the store itself as FCALL (the
 * functions library, the default) and as EVALSHA (`functions: false`), on one throwaway
 * redis-server. The two stores take turns, batch by batch, on one key space each, so the machine's
 * noise falls on both alike. Redis's own time per command: `cmdstat_fcall` and
 * `cmdstat_evalsha` usec_per_call, read after each phase (CONFIG RESETSTAT before it). Nothing is
 * asserted.
 */
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import type { ClaimRequest, OwnerRef } from '../../../src/core/store.js'
import { type RedisStore, redisStore } from '../../../src/stores/redis/index.js'
import { startRedisServer } from '../../redis-server.js'

const args = process.argv.slice(2)
const option = (name: string, fallback: string): string =>
  args.includes(name) ? (args[args.indexOf(name) + 1] as string) : fallback
const ROUNDS = Number(option('--rounds', '3'))
const CALLS = Number(option('--calls', '4000'))
const BATCH = 100
const TIMES = { leaseMs: 60_000, replayWindowMs: 60_000, failureRetentionMs: 60_000 } as const

const server = await startRedisServer({ config: { 'maxmemory-policy': 'noeviction', save: '' } })
const admin = new Redis(server.port, '127.0.0.1', { commandTimeout: 10_000 })
const connect = async () => {
  const redis = new Redis(server.port, '127.0.0.1', { commandTimeout: 10_000 })
  await redis.ping()
  return redis
}
const clients = [await connect(), await connect()]
const stores = {
  fcall: redisStore({ redis: clients[0] as Redis, keyPrefix: 'fn', onEvent: () => undefined }),
  evalsha: redisStore({ redis: clients[1] as Redis, keyPrefix: 'sc', functions: false, onEvent: () => undefined }),
}
const owner = randomBytes(32).toString('hex')
const request = (_store: RedisStore, key: string, start: boolean): ClaimRequest => ({
  key,
  owner,
  fingerprint: 'f1:aa',
  operation: 'POST /orders',
  codec: 'json-1',
  policy: '1',
  start,
  expiredExecution: 'recover',
  ...TIMES,
})
const keyOf = (store: RedisStore, phase: string, round: number, i: number) =>
  `${store.keyPrefix}:idem:1:d1:op:${phase}${round}:${i}`

async function stats(): Promise<Record<'fcall' | 'evalsha', number>> {
  const text = await admin.info('commandstats')
  const usec = (command: string) =>
    Number(new RegExp(`cmdstat_${command}:calls=\\d+,usec=\\d+,usec_per_call=([\\d.]+)`).exec(text)?.[1] ?? NaN)
  return { fcall: usec('fcall'), evalsha: usec('evalsha') }
}

/** Runs `each(store, i)` for CALLS keys per store, the stores taking turns batch by batch. */
async function phase(each: (store: RedisStore, i: number) => Promise<unknown>): Promise<void> {
  for (let from = 0; from < CALLS; from += BATCH) {
    for (const store of [stores.fcall, stores.evalsha]) {
      await Promise.all(Array.from({ length: Math.min(BATCH, CALLS - from) }, (_, j) => each(store, from + j)))
    }
  }
}

const rows: { round: number; op: string; fcall: number; evalsha: number }[] = []
try {
  // Warm up: each store loads what it sends (the library, the scripts).
  for (const store of [stores.fcall, stores.evalsha])
    await store.claim(request(store, keyOf(store, 'warm', 0, 0), false))
  for (let round = 1; round <= ROUNDS; round++) {
    // Claim: each key claimed once (a plain SET), then claimed again by its holder through the script.
    await phase((store, i) => store.claim(request(store, keyOf(store, 'c', round, i), false)))
    await admin.config('RESETSTAT')
    await phase((store, i) => store.claim(request(store, keyOf(store, 'c', round, i), false)))
    rows.push({ round, op: 'claim (script)', ...(await stats()) })
    // Complete: each key claimed and started (a plain SET), then completed.
    const refs = new Map<string, OwnerRef>()
    await phase(async (store, i) => {
      const key = keyOf(store, 'd', round, i)
      const claim = await store.claim(request(store, key, true))
      if (claim.kind !== 'ACQUIRED') throw new Error(claim.kind)
      refs.set(key, { key, owner, attempt: claim.attempt, rev: claim.rev })
    })
    await admin.config('RESETSTAT')
    await phase((store, i) => {
      const key = keyOf(store, 'd', round, i)
      return store.complete(refs.get(key) as OwnerRef, Buffer.from('{"ok":true,"id":12345}'), TIMES)
    })
    rows.push({ round, op: 'complete', ...(await stats()) })
  }
  console.log(
    `Redis ${(await admin.info('server')).match(/redis_version:(\S+)/)?.[1]}, ${CALLS} calls per store per phase`,
  )
  console.log('round  operation        FCALL us/call  EVALSHA us/call  FCALL/EVALSHA')
  for (const row of rows) {
    console.log(
      `${String(row.round).padEnd(7)}${row.op.padEnd(17)}${row.fcall.toFixed(2).padStart(13)}${row.evalsha.toFixed(2).padStart(17)}${(row.fcall / row.evalsha).toFixed(2).padStart(15)}`,
    )
  }
  for (const op of ['claim (script)', 'complete']) {
    const of = rows.filter((row) => row.op === op)
    const mean = (pick: (row: (typeof rows)[number]) => number) => of.reduce((s, r) => s + pick(r), 0) / of.length
    console.log(
      `mean   ${op.padEnd(17)}${mean((r) => r.fcall)
        .toFixed(2)
        .padStart(13)}${mean((r) => r.evalsha)
        .toFixed(2)
        .padStart(17)}${(mean((r) => r.fcall) / mean((r) => r.evalsha)).toFixed(2).padStart(15)}`,
    )
  }
} finally {
  await stores.fcall.close()
  await stores.evalsha.close()
  for (const client of clients) client.disconnect()
  admin.disconnect()
  await server.stop()
}
