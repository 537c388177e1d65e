/**
 * The replay cache (opt-in, `replayCache`; docs/options.md "Replay cache"): completed answers a
 * store handed back to a claim (COMPLETED_REPLAY, docs/design.md §3 claim step 3), kept in this
 * process so a later replay of the same request is answered without a store round trip.
 *
 * It decides nothing of its own: an entry is only ever a store's COMPLETED_REPLAY reply, and it
 * answers only a claim that would have been sent with the same store, store key (the principal
 * and operation are digested into it), fingerprint, operation, codec and policy; any other claim
 * goes to the store as before, which applies the claim rule (src/core/rules.ts) to it. A claim
 * the store answers with anything else drops the key's entry. An entry lives until the record's
 * `replayUntil` (the store's clock, read against this process's) or `maxAgeMs` after it was
 * cached, whichever is first; the cache is bounded in entries and bytes, least recently used
 * first out. What it trades: an operator's change to a completed record (`idemkit resolve`,
 * `idemkit delete`) is seen by this process after at most `maxAgeMs`.
 */
import { integerOption, invalidOption } from './errors.js'
import { omitUndefined } from './policy.js'
import { ClaimReply } from './record.js'
import type { ClaimRequest, ClaimResult, IdempotencyStore, StoredCompletion } from './store.js'
import { checkOptionNames } from './store-front.js'

/** The bounds of a replay cache. */
export interface ReplayCacheOptions {
  /** The most answers kept. @default 1000 */
  readonly maxEntries?: number
  /** The most bytes kept (stored responses and the keys, fingerprints and names with them). @default 8388608 (8 MiB) */
  readonly maxBytes?: number
  /** The longest one answer is kept, in milliseconds: how late an operator's change is seen. @default 5000 */
  readonly maxAgeMs?: number
}

export const REPLAY_CACHE_DEFAULTS = Object.freeze({ maxEntries: 1000, maxBytes: 8 * 1024 * 1024, maxAgeMs: 5000 })

const OPTION_NAMES = ['maxEntries', 'maxBytes', 'maxAgeMs'] as const

/** A store's COMPLETED_REPLAY reply. */
export type CompletedReplay = Extract<ClaimResult, { kind: typeof ClaimReply.COMPLETED_REPLAY }>

interface Entry {
  readonly store: IdempotencyStore
  readonly fingerprint: string
  readonly operation: string
  readonly codec: string
  readonly policy: string
  readonly reply: CompletedReplay
  /** Epoch ms (this process's clock) from which the entry answers nothing. */
  readonly until: number
  readonly bytes: number
}

/** Bytes an entry is counted for beyond its strings and response: the objects around them. */
const ENTRY_OVERHEAD = 200

export class ReplayCache {
  readonly maxEntries: number
  readonly maxBytes: number
  readonly maxAgeMs: number
  /** By store key, least recently used first (a `Map` keeps insertion order). */
  readonly #entries = new Map<string, Entry>()
  #bytes = 0

  /** @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` naming `replayCache.<option>`. */
  constructor(options: ReplayCacheOptions = {}, name = 'replayCache') {
    checkOptionNames(options, OPTION_NAMES, name, `${name}.`)
    const { maxEntries, maxBytes, maxAgeMs } = { ...REPLAY_CACHE_DEFAULTS, ...omitUndefined(options) }
    this.maxEntries = integerOption(`${name}.maxEntries`, maxEntries, 1, 10_000_000)
    this.maxBytes = integerOption(`${name}.maxBytes`, maxBytes, 1, Number.MAX_SAFE_INTEGER, 'bytes')
    this.maxAgeMs = integerOption(`${name}.maxAgeMs`, maxAgeMs, 1, 86_400_000, 'milliseconds')
  }

  /** How many answers are kept now. */
  get size(): number {
    return this.#entries.size
  }

  /** How many bytes the kept answers are counted for. */
  get bytes(): number {
    return this.#bytes
  }

  /**
   * The store's COMPLETED_REPLAY reply cached for this exact claim, or `undefined`: the claim
   * then goes to the store.
   */
  get(store: IdempotencyStore, request: ClaimRequest): CompletedReplay | undefined {
    const entry = this.#entries.get(request.key)
    if (entry === undefined) return undefined
    if (entry.until <= Date.now()) {
      this.#drop(request.key, entry)
      return undefined
    }
    if (
      entry.store !== store ||
      entry.fingerprint !== request.fingerprint ||
      entry.operation !== request.operation ||
      entry.codec !== request.codec ||
      entry.policy !== request.policy
    ) {
      return undefined
    }
    // Most recently used: to the end of the order.
    this.#entries.delete(request.key)
    this.#entries.set(request.key, entry)
    return entry.reply
  }

  /**
   * What the store answered `request`: a COMPLETED_REPLAY is kept (for at most `maxAgeMs` and
   * never past its `replayUntil`); anything else drops the key's entry.
   */
  note(store: IdempotencyStore, request: ClaimRequest, reply: ClaimResult): void {
    const { key } = request
    const old = this.#entries.get(key)
    if (old !== undefined) this.#drop(key, old)
    if (reply.kind !== ClaimReply.COMPLETED_REPLAY) return
    const now = Date.now()
    const until = Math.min(reply.replayUntil, now + this.maxAgeMs)
    const bytes =
      ENTRY_OVERHEAD +
      reply.response.length +
      2 *
        (key.length + request.fingerprint.length + request.operation.length + reply.codec.length + reply.policy.length)
    if (bytes > this.maxBytes || until <= now) return
    const entry: Entry = {
      store,
      fingerprint: request.fingerprint,
      operation: request.operation,
      codec: request.codec,
      policy: request.policy,
      reply: { ...reply, response: ownBytes(reply.response) },
      until,
      bytes,
    }
    this.#entries.set(key, entry)
    this.#bytes += bytes
    for (const [oldest, first] of this.#entries) {
      if (this.#entries.size <= this.maxEntries && this.#bytes <= this.maxBytes) break
      this.#drop(oldest, first)
    }
  }

  /** Forgets every answer. */
  clear(): void {
    this.#entries.clear()
    this.#bytes = 0
  }

  #drop(key: string, entry: Entry): void {
    this.#entries.delete(key)
    this.#bytes -= entry.bytes
  }
}

/** The response in a buffer of its own: a view of a larger one (a client's read buffer) would keep all of it. */
function ownBytes(response: StoredCompletion['response']): Buffer {
  return response.byteLength === response.buffer.byteLength ? response : Buffer.from(response)
}

/**
 * The `replayCache` option of the adapters, `idempotent()` and the executor: absent or `false`
 * is off (the default), `true` the default bounds, an object its own bounds, a `ReplayCache`
 * itself (one shared by several executors).
 * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` naming `replayCache` or one of its options.
 */
export function replayCacheOption(
  value: boolean | ReplayCacheOptions | ReplayCache | undefined,
  name = 'replayCache',
): ReplayCache | undefined {
  if (value === undefined || value === false) return undefined
  if (value === true) return new ReplayCache({}, name)
  if (value instanceof ReplayCache) return value
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    invalidOption(name, 'a boolean or { maxEntries?, maxBytes?, maxAgeMs? }', value)
  }
  return new ReplayCache(value, name)
}
