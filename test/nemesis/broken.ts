/**
 * The deliberately broken builds the nemesis must catch (NEMESIS_BROKEN, test/nemesis/app.ts):
 * the real store with one rule taken out, so that the seed set proves its checker sees that
 * rule broken under load and faults (seeds.test.ts).
 *
 * - `no-claim`: a claim on a record another execution holds answers ACQUIRED (the claim is not
 *   held: a duplicate runs the handler again);
 * - `ignore-fingerprint`: a claim takes the stored record's fingerprint as its own (a changed
 *   body gets the first body's answer instead of 422);
 * - `complete-no-owner-lean` (Redis): complete.lua's lean path writes the completion onto any
 *   live record, without comparing its state, attempt, rev and owner (docs/design.md §6, "A
 *   lean completion"): a stale owner, taken over, overwrites the new owner's answer;
 * - `complete-no-owner-full` (Redis): the lean path off, and the full path's transition check
 *   (lib/held `hold`) replaced by a read of the live record: the same, on the full path;
 * - `no-principal`: the principal left out of the scope (the app's `principal` answers one name
 *   for every user), so a key string another principal used replays that principal's answer;
 * - `fresh-downstream-key`: the `/resumes` handler calls the payment service with a new random
 *   key on each run instead of `keyFor('charge')`, so a resumed or taken-over run charges again.
 */
import type { Cluster, Redis } from 'ioredis'
import { ClaimReply } from '../../src/core/record.js'
import type { ClaimResult, IdempotencyStore, OwnerRef, RecordTimes, TransitionResult } from '../../src/core/store.js'
import { decodeTransitionReply } from '../../src/stores/redis/replies.js'
import { loadScripts } from '../../src/stores/redis/script-loader.js'

export const BROKEN_BUILDS = [
  'no-claim',
  'ignore-fingerprint',
  'complete-no-owner-lean',
  'complete-no-owner-full',
  'no-principal',
  'fresh-downstream-key',
] as const
export type BrokenBuild = (typeof BROKEN_BUILDS)[number]

/** The broken build NEMESIS_BROKEN names (undefined for the real one). */
export function brokenBuild(text: string | undefined): BrokenBuild | undefined {
  if (text === undefined || text === '') return undefined
  if (!(BROKEN_BUILDS as readonly string[]).includes(text)) throw new Error(`NEMESIS_BROKEN: ${text}?`)
  return text as BrokenBuild
}

/** Replaces `from` in `text`, which must hold it exactly once. */
function patch(text: string, from: string, to: string): string {
  const at = text.indexOf(from)
  if (at < 0 || text.indexOf(from, at + 1) >= 0) throw new Error(`complete.lua changed: ${from.slice(0, 60)}…`)
  return text.slice(0, at) + to + text.slice(at + from.length)
}

/** complete.lua without its owner check, on the lean or the full path. */
export function brokenCompleteLua(mode: 'complete-no-owner-lean' | 'complete-no-owner-full'): string {
  const lua = loadScripts().complete.lua
  if (mode === 'complete-no-owner-lean') {
    return patch(
      lua,
      `if (version ~= 2 and version ~= 3) or string.sub(raw, 2, 2) ~= 'E'
    or string.sub(raw, 3, 18) ~= struct.pack('>dd', attempt, rev) or string.sub(raw, 59, 122) ~= owner then`,
      'if version ~= 2 and version ~= 3 then',
    )
  }
  const full = patch(lua, 'local done = complete_lean(KEYS[1], ARGV[5])', 'local done = nil')
  return patch(
    full,
    "local rec, refusal, key, now = hold(owner, attempt, rev, 'EXECUTING', 'COMPLETED')",
    `local key, now = KEYS[1], now_ms()
local rec = live_record(key, now)
local refusal = nil
if rec == nil then
  refusal = { 'NOT_FOUND' }
else
  rec.waited = waited(rec)
end`,
  )
}

/** The store with the broken behaviour `mode` asks for (the real one without it). */
export function brokenStore(
  store: IdempotencyStore,
  mode: BrokenBuild | undefined,
  redis: Redis | Cluster | undefined,
): IdempotencyStore {
  if (mode === undefined || mode === 'no-principal' || mode === 'fresh-downstream-key') return store
  if (mode === 'complete-no-owner-lean' || mode === 'complete-no-owner-full') {
    if (redis === undefined) throw new Error(`NEMESIS_BROKEN=${mode} needs the Redis store`)
    const lua = brokenCompleteLua(mode)
    // The store's own completion (RedisStore's doComplete), sent as the patched script.
    Object.assign(store, {
      doComplete: async (ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult> =>
        decodeTransitionReply(
          'complete',
          await redis.eval(
            lua,
            1,
            ref.key,
            ref.owner,
            String(ref.attempt),
            String(ref.rev),
            String(times.replayWindowMs),
            Buffer.from(response),
          ),
        ),
    })
    return store
  }
  const read = store.read?.bind(store)
  if (read === undefined) throw new Error('NEMESIS_BROKEN needs a store with read()')
  return new Proxy(store, {
    get(target, name, receiver) {
      if (name === 'claim') {
        return async (request: Parameters<IdempotencyStore['claim']>[0]): Promise<ClaimResult> => {
          if (mode === 'ignore-fingerprint') {
            const stored = (await read(request.key)).record
            return target.claim(stored === undefined ? request : { ...request, fingerprint: stored.fp })
          }
          const result = await target.claim(request)
          if (mode === 'no-claim' && result.kind === ClaimReply.IN_PROGRESS) {
            const stored = (await read(request.key)).record
            if (stored !== undefined && stored.state === 'EXECUTING') {
              return {
                kind: ClaimReply.ACQUIRED,
                state: 'EXECUTING',
                attempt: stored.attempt,
                rev: stored.rev,
                leaseUntil: stored.leaseUntil,
              }
            }
          }
          return result
        }
      }
      const value = Reflect.get(target, name, receiver)
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
}
