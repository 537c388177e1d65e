/**
 * `npx tsx scripts/bench/studies/lean-complete.ts [--rounds n] [--calls n] [--before <scripts dir>]`: Redis's own time per call
 * of complete.lua as the store sends it (the lean path first, docs/design.md §6 "A lean
 * completion") against the same script with the lean call taken out (the full path alone, the
 * completion as it was before), on one throwaway redis-server. Two records: a fresh claim
 * (layout 3, as the store's claim without a script writes it) and one a script rewrote (layout
 * 2, started by start.lua). `--before <dir>`: the full path is that directory's complete.lua
 * (with its lib/), e.g. an earlier tree's `src/stores/redis/scripts`, in place of this one's
 * without the lean call.
 *
 * Each round completes `calls` records with each script, in phases of their own (the order
 * alternating by round); a phase's time is `cmdstat_evalsha` usec over calls (INFO
 * commandstats, reset before it) and the slow log's per-call durations (`slowlog-log-slower-than
 * 0`) as the mean of their middle half. Round 0 warms up. Nothing is asserted; every reply is
 * checked to be OK.
 */
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { encodeFreshClaim, packClaimTexts } from '../../../src/stores/record-layout.js'
import { loadScripts, resolveScript } from '../../../src/stores/redis/script-loader.js'
import { startRedisServer } from '../../redis-server.js'
import { median, option } from '../common.js'

const ROUNDS = Number(option('--rounds', '10'))
const CALLS = Number(option('--calls', '5000'))
const BATCH = 100
const LEASE_MS = 30_000
const RETENTION_MS = 30_000

const scripts = loadScripts()
const LEAN = scripts.complete.lua
const before = option('--before', undefined)
const FULL =
  before !== undefined
    ? resolveScript(before, 'complete.lua')
    : LEAN.replace(/\nlocal done = complete_lean\(KEYS\[1\], ARGV\[5\]\)\nif done then\n {2}return done\nend\n/, '\n')
if (FULL === LEAN || (before === undefined && FULL.includes('local done = complete_lean(')))
  throw new Error('complete.lua has no lean call to take out')

/** The mean of the middle half of `values`. */
function middleMean(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = sorted.slice(Math.floor(sorted.length / 4), Math.ceil((sorted.length * 3) / 4))
  return middle.reduce((sum, v) => sum + v, 0) / middle.length
}

const server = await startRedisServer({
  config: {
    'maxmemory-policy': 'noeviction',
    save: '',
    'slowlog-log-slower-than': '0',
    'slowlog-max-len': String(CALLS + 100),
  },
})
const redis = new Redis(server.port, '127.0.0.1', { commandTimeout: 10_000 })
try {
  const leanSha = String(await redis.script('LOAD', LEAN))
  const fullSha = String(await redis.script('LOAD', FULL))
  const startSha = String(await redis.script('LOAD', scripts.start.lua))
  const texts = packClaimTexts('json-1', '1', 'POST /orders')
  const response = Buffer.from(JSON.stringify({ status: 201, body: { id: 1 } }))

  async function inBatches(calls: readonly (() => Promise<unknown>)[]): Promise<unknown[]> {
    const replies: unknown[] = []
    for (let at = 0; at < calls.length; at += BATCH)
      replies.push(...(await Promise.all(calls.slice(at, at + BATCH).map((c) => c()))))
    return replies
  }

  /** `CALLS` EXECUTING records: their keys and owners, fresh (layout 3) or started (layout 2, rev 2). */
  async function records(prefix: string, started: boolean): Promise<{ key: string; owner: string }[]> {
    const made = Array.from({ length: CALLS }, (_, i) => ({
      key: `b:${prefix}:${i}`,
      owner: randomBytes(32).toString('hex'),
    }))
    await inBatches(
      made.map(({ key, owner }) => () => {
        const claim = {
          owner,
          fingerprint: 'f1:aa',
          start: !started,
          leaseMs: LEASE_MS,
          failureRetentionMs: RETENTION_MS,
        }
        return redis.set(key, encodeFreshClaim(claim, texts), 'PX', LEASE_MS + RETENTION_MS - 1)
      }),
    )
    if (started) {
      const replies = await inBatches(
        made.map(
          ({ key, owner }) =>
            () =>
              redis.evalsha(startSha, 1, key, owner, '1', '1', String(LEASE_MS), String(RETENTION_MS)),
        ),
      )
      if (replies.some((r) => String((r as unknown[])[0]) !== 'OK')) throw new Error('start did not answer OK')
    }
    return made
  }

  /** Completes `made` with the script `sha`: Redis's µs per call (commandstats, slow log middle mean). */
  async function phase(sha: string, made: { key: string; owner: string }[], rev: number): Promise<[number, number]> {
    await redis.config('RESETSTAT')
    await redis.call('SLOWLOG', 'RESET')
    const replies = await inBatches(
      made.map(
        ({ key, owner }) =>
          () =>
            redis.evalsha(sha, 1, key, owner, '1', String(rev), '60000', response),
      ),
    )
    if (replies.some((r) => String((r as unknown[])[0]) !== 'OK')) throw new Error('complete did not answer OK')
    const info = await redis.info('commandstats')
    const match = /^cmdstat_evalsha:calls=(\d+),usec=(\d+)/m.exec(info)
    const log = (await redis.call('SLOWLOG', 'GET', '-1')) as [number, number, number, string[]][]
    const durations = log.filter((e) => String(e[3][0]).toLowerCase() === 'evalsha').map((e) => Number(e[2]))
    return [match ? Number(match[2]) / Number(match[1]) : Number.NaN, middleMean(durations)]
  }

  const rows: Record<string, { full: number[]; lean: number[]; fullMid: number[]; leanMid: number[] }> = {
    'fresh claim (layout 3)': { full: [], lean: [], fullMid: [], leanMid: [] },
    'started claim (layout 2)': { full: [], lean: [], fullMid: [], leanMid: [] },
  }
  for (let round = 0; round <= ROUNDS; round++) {
    for (const [name, started] of [
      ['fresh claim (layout 3)', false],
      ['started claim (layout 2)', true],
    ] as const) {
      await redis.flushall()
      const forFull = await records(`f${round}`, started)
      const forLean = await records(`l${round}`, started)
      const rev = started ? 2 : 1
      const order = round % 2 === 0 ? (['full', 'lean'] as const) : (['lean', 'full'] as const)
      const timed: Record<string, [number, number]> = {}
      for (const which of order)
        timed[which] = await phase(which === 'full' ? fullSha : leanSha, which === 'full' ? forFull : forLean, rev)
      if (round === 0) continue
      const row = rows[name] as (typeof rows)[string]
      row.full.push((timed.full as [number, number])[0])
      row.lean.push((timed.lean as [number, number])[0])
      row.fullMid.push((timed.full as [number, number])[1])
      row.leanMid.push((timed.lean as [number, number])[1])
    }
  }

  const figure = (values: number[]) =>
    `${median(values).toFixed(2)} (${Math.min(...values).toFixed(2)}..${Math.max(...values).toFixed(2)})`
  console.log(
    `Redis ${(await redis.info('server')).match(/redis_version:(\S+)/)?.[1]}; ${CALLS} calls per phase, ${ROUNDS} rounds`,
  )
  console.log('complete.lua, µs per call, Redis own time, median (range) over rounds')
  console.log(
    '| record | full path (commandstats) | lean path (commandstats) | lean / full | full (slow log) | lean (slow log) |',
  )
  console.log('| --- | ---: | ---: | ---: | ---: | ---: |')
  for (const [name, row] of Object.entries(rows)) {
    console.log(
      `| ${name} | ${figure(row.full)} | ${figure(row.lean)} | ${figure(row.lean.map((v, i) => v / (row.full[i] as number)))} | ` +
        `${figure(row.fullMid)} | ${figure(row.leanMid)} |`,
    )
  }
} finally {
  redis.disconnect()
  await server.stop()
}
