/**
 * `npx tsx scripts/bench/studies/functions-study.ts [--rounds n] [--calls n]`: the Redis store's claim
 * and complete as Redis Functions (FUNCTION LOAD once, FCALL per call) against the scripts as the
 * store sends them (EVALSHA), on one throwaway redis-server. The library is built here from the
 * same `.lua` files: the `lib/` helpers defined once at the library's top level, each script's
 * body a function registered under its name (KEYS and ARGV handed to it as the upvalues the
 * helpers read). A study, not the store's code path.
 *
 * The two are sent call by call in turn on one connection (EVALSHA on one key, FCALL on another,
 * the next pair, ...), so the machine's noise falls on both alike; their time is Redis's own
 * per-command time, `cmdstat_evalsha` and `cmdstat_fcall` usec over calls, and the slow log's
 * per-call durations (`slowlog-log-slower-than 0`: every command), per round. Empty
 * bodies (`return 1`) give what EVALSHA and FCALL cost by themselves. Nothing is asserted.
 */
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Redis } from 'ioredis'
import { packClaimTexts } from '../../../src/stores/record-layout.js'
import { loadScripts, SCRIPTS_DIR } from '../../../src/stores/redis/script-loader.js'
import { startRedisServer } from '../../redis-server.js'
import { median, option } from '../common.js'

const ROUNDS = Number(option('--rounds', '10'))
const CALLS = Number(option('--calls', '5000'))
const BATCH = 100

const INCLUDE = /^\s*---\s*@include.*$/gm
const source = (path: string) => readFileSync(`${SCRIPTS_DIR}${path}`, 'utf8')
const body = (path: string) =>
  source(path)
    .replace(/^#!.*\n/, '')
    .replace(INCLUDE, '')

/** The helpers in the order the includes need them, each once. */
const HELPERS = ['args', 'now', 'record', 'live', 'notify', 'transition', 'held']
const library = [
  '#!lua name=idemkit_study',
  // The helpers read KEYS and ARGV as globals in a script; here they are the library's upvalues.
  'local KEYS, ARGV',
  ...HELPERS.map((name) => body(`lib/${name}.lua`)),
  'local function claim_body()',
  body('claim.lua'),
  'end',
  'local function complete_body()',
  body('complete.lua'),
  'end',
  "redis.register_function{function_name='study_claim', callback=function(keys, argv) KEYS, ARGV = keys, argv; return claim_body() end}",
  "redis.register_function{function_name='study_complete', callback=function(keys, argv) KEYS, ARGV = keys, argv; return complete_body() end, flags={'allow-oom'}}",
  "redis.register_function{function_name='study_empty', callback=function() return 1 end}",
].join('\n')

interface Timing {
  readonly evalsha: number
  readonly fcall: number
  readonly evalshaMid: number
  readonly fcallMid: number
}

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
    'slowlog-max-len': String(2 * CALLS + 100),
  },
})
const redis = new Redis(server.port, '127.0.0.1', { commandTimeout: 10_000 })
try {
  await redis.call('FUNCTION', 'LOAD', 'REPLACE', library)
  const scripts = loadScripts()
  const claimSha = String(await redis.script('LOAD', scripts.claim.lua))
  const completeSha = String(await redis.script('LOAD', scripts.complete.lua))
  const emptySha = String(await redis.script('LOAD', 'return 1'))
  const texts = packClaimTexts('json-1', '1', 'POST /orders')
  const response = Buffer.from(JSON.stringify({ status: 201, body: { id: 1 } }))

  const owner = () => randomBytes(32).toString('hex')
  const claimArgs = (who: string) => [who, 'f1:aa', '1', 'recover', '30000', '30000', texts, '0']
  type Pair = readonly [evalsha: () => Promise<unknown>, fcall: () => Promise<unknown>]

  /** Sends the pairs, EVALSHA then FCALL, in batches; answers their replies as text for a check. */
  async function inTurn(pairs: readonly Pair[]): Promise<[unknown[], unknown[]]> {
    const viaScript: unknown[] = []
    const viaFunction: unknown[] = []
    for (let at = 0; at < pairs.length; at += BATCH) {
      const sent = pairs.slice(at, at + BATCH).flatMap(([a, b]) => [a(), b()])
      const replies = await Promise.all(sent)
      for (const [i, reply] of replies.entries()) (i % 2 === 0 ? viaScript : viaFunction).push(reply)
    }
    return [viaScript, viaFunction]
  }

  /** Starts a phase: command stats and the slow log (every command, `slowlog-log-slower-than 0`) emptied. */
  async function reset(): Promise<void> {
    await redis.config('RESETSTAT')
    await redis.call('SLOWLOG', 'RESET')
  }

  /**
   * The phase's time per call of each: the mean from commandstats, and the slow log's per-call
   * durations (whole µs) as the mean of their middle half, which a call descheduled by the
   * machine's other work does not move.
   */
  async function perCall(): Promise<Timing> {
    const info = await redis.info('commandstats')
    const usec = (name: string) => {
      const match = new RegExp(`^cmdstat_${name}:calls=(\\d+),usec=(\\d+)`, 'm').exec(info)
      return match ? Number(match[2]) / Number(match[1]) : Number.NaN
    }
    const log = (await redis.call('SLOWLOG', 'GET', '-1')) as [number, number, number, Buffer[] | string[]][]
    const durations = (name: string) =>
      log.filter((entry) => String(entry[3][0]).toLowerCase() === name).map((entry) => Number(entry[2]))
    return {
      evalsha: usec('evalsha'),
      fcall: usec('fcall'),
      evalshaMid: middleMean(durations('evalsha')),
      fcallMid: middleMean(durations('fcall')),
    }
  }

  const same = (a: unknown[], b: unknown[], what: string) => {
    const shape = (reply: unknown) => (Array.isArray(reply) ? String(reply[0]) : String(reply))
    const mismatch = a.findIndex((reply, i) => shape(reply) !== shape(b[i]))
    if (mismatch >= 0) throw new Error(`${what}: ${shape(a[mismatch])} by EVALSHA, ${shape(b[mismatch])} by FCALL`)
  }

  const rows: Record<string, Timing[]> = {
    empty: [],
    'claim, new key': [],
    'claim, in progress': [],
    complete: [],
  }
  for (let round = 0; round <= ROUNDS; round++) {
    await redis.flushall()
    const keys = Array.from({ length: CALLS }, (_, i) => [
      `s:idem:1:d1:op:e${round}-${i}`,
      `s:idem:1:d1:op:f${round}-${i}`,
    ])
    const owners = keys.map(() => [owner(), owner()] as const)

    await reset()
    await inTurn(keys.map(() => [() => redis.evalsha(emptySha, 0), () => redis.call('FCALL', 'study_empty', '0')]))
    const empty = await perCall()

    await reset()
    const claimed = await inTurn(
      keys.map(([e, f], i) => [
        () => redis.evalsha(claimSha, 1, e as string, ...claimArgs(owners[i]?.[0] as string)),
        () => redis.call('FCALL', 'study_claim', '1', f as string, ...claimArgs(owners[i]?.[1] as string)),
      ]),
    )
    const claim = await perCall()
    same(...claimed, 'claim')

    await reset()
    const busy = await inTurn(
      keys.map(([e, f]) => [
        () => redis.evalsha(claimSha, 1, e as string, ...claimArgs(owner())),
        () => redis.call('FCALL', 'study_claim', '1', f as string, ...claimArgs(owner())),
      ]),
    )
    const inProgress = await perCall()
    same(...busy, 'claim in progress')

    await reset()
    const completed = await inTurn(
      keys.map(([e, f], i) => [
        () => redis.evalsha(completeSha, 1, e as string, owners[i]?.[0] as string, '1', '1', '60000', response),
        () =>
          redis.call(
            'FCALL',
            'study_complete',
            '1',
            f as string,
            owners[i]?.[1] as string,
            '1',
            '1',
            '60000',
            response,
          ),
      ]),
    )
    const complete = await perCall()
    same(...completed, 'complete')
    if (String((completed[0][0] as unknown[])[0]) !== 'OK')
      throw new Error(`complete answered ${String(completed[0][0])}`)

    // Round 0 warms up (the library and the scripts compiled, the allocator warm).
    if (round === 0) continue
    rows.empty?.push(empty)
    rows['claim, new key']?.push(claim)
    rows['claim, in progress']?.push(inProgress)
    rows.complete?.push(complete)
  }

  const figure = (values: number[]) =>
    `${median(values).toFixed(2)} (${Math.min(...values).toFixed(2)}..${Math.max(...values).toFixed(2)})`
  console.log(
    `Redis ${(await redis.info('server')).match(/redis_version:(\S+)/)?.[1]}; ${CALLS} pairs per phase, ${ROUNDS} rounds`,
  )
  console.log(
    'µs per call, Redis own time, median (range) over rounds: commandstats mean | slow log, mean of the middle half',
  )
  console.log(
    '| call | EVALSHA | FCALL | FCALL / EVALSHA, paired per round | EVALSHA (slow log) | FCALL (slow log) | FCALL / EVALSHA (slow log) |',
  )
  console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: |')
  for (const [name, values] of Object.entries(rows)) {
    console.log(
      `| ${name} | ${figure(values.map((v) => v.evalsha))} | ${figure(values.map((v) => v.fcall))} | ` +
        `${figure(values.map((v) => v.fcall / v.evalsha))} | ${figure(values.map((v) => v.evalshaMid))} | ` +
        `${figure(values.map((v) => v.fcallMid))} | ${figure(values.map((v) => v.fcallMid / v.evalshaMid))} |`,
    )
  }
} finally {
  redis.disconnect()
  await server.stop()
}
