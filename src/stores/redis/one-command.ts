/**
 * The one-command completion (`oneCommandCompletion`; docs/design.md §6, "A one-command
 * completion"): an execution this store claimed without a script (a layout-3 EXECUTING record,
 * `SET ... NX GET PX`) is completed with one command fenced by the claim's whole bytes: `SET key
 * <COMPLETED record> IFEQ <claimed bytes> PX <replayWindowMs - 1>` where the server has IFEQ
 * (Valkey 8.1, Redis 8.4), compare-and-set.lua elsewhere. The record is written in layout 4, its
 * times counted from the key's expiry that the PX sets (`completedFromClaim`). Whatever the
 * claimed bytes no longer match goes to complete.lua, which answers as it always did.
 */
import { TransitionReply } from '../../core/record.js'
import type { ClaimRequest, OwnerRef, RecordTimes, TransitionResult } from '../../core/store.js'
import { completedFromClaim } from '../record-layout.js'
import type { Connection } from './connection.js'
import { redisFault } from './faults.js'
import { sendCommand } from './framed.js'
import type { ScriptCommand } from './script-calls.js'

/**
 * At most this many claims are remembered: one per execution in flight in this process, dropped
 * when it ends. Past it the oldest is dropped, and its completion goes to complete.lua.
 */
const MAX_REMEMBERED = 10_000

/** Redis's answer to a SET option it does not know: the server has no IFEQ. */
const NO_IFEQ = /^ERR syntax error/i

/** `#withoutIfeq` before any server answered without IFEQ: no connection is this one (a Cluster's is undefined). */
const NO_CONNECTION: unique symbol = Symbol('no connection')

/** A claim this store wrote without a script, as written. */
interface Claimed {
  readonly owner: string
  readonly bytes: Buffer
  /** When the claim's SET was sent (local monotonic ms): the record's createdAt, within a round trip. */
  readonly sentAt: number
}

/** The claims this store wrote in layout 3, and their completions with one command. */
export class OneCommandCompletion {
  readonly #connection: Connection
  /** SET ... IFEQ ... PX, its reply a string ('OK', or null where nothing was written). */
  readonly #setIfEqual: ScriptCommand
  /** compare-and-set.lua (as FCALL or a script): 1 written, 0 not. */
  readonly #compareAndSet: ScriptCommand
  /** The claims remembered, by key: the executions in flight that this store claimed without a script. */
  readonly #claims = new Map<string, Claimed>()
  /**
   * The connection whose server answered SET ... IFEQ with `ERR syntax error` (it has no IFEQ):
   * the completions on it send compare-and-set.lua. Any other connection (none yet, or a new one
   * after a reconnect, perhaps to another server after a failover) is tried with IFEQ first.
   */
  #withoutIfeq: unknown = NO_CONNECTION

  constructor(connection: Connection, compareAndSet: ScriptCommand) {
    const redis = connection.redis
    this.#connection = connection
    this.#compareAndSet = compareAndSet
    this.#setIfEqual = (key, ...args) => sendCommand(redis, 'set', [key, ...args], false)
  }

  /** Remembers a claim the store wrote without a script, if it started an execution (EXECUTING: the one a completion can follow). */
  claimed(request: ClaimRequest, bytes: Buffer, sentAt: number): void {
    if (!request.start) return
    if (this.#claims.size >= MAX_REMEMBERED && !this.#claims.has(request.key)) {
      const oldest = this.#claims.keys().next().value as string
      this.#claims.delete(oldest)
    }
    this.#claims.set(request.key, { owner: request.owner, bytes, sentAt })
  }

  /** Drops the claim under `key`: its record was or may be written again (start, renew, markFailed, release). */
  forget(key: string): void {
    this.#claims.delete(key)
  }

  /**
   * Completes `ref` with one command, if this store claimed it without a script and remembers
   * the claim's bytes; undefined otherwise, and the store sends complete.lua. Where the command
   * writes nothing (the key holds other bytes or none) or Redis refuses it, `fallback`
   * (complete.lua) answers.
   */
  complete(
    ref: OwnerRef,
    response: Uint8Array,
    times: RecordTimes,
    fallback: () => Promise<TransitionResult>,
  ): Promise<TransitionResult> | undefined {
    const claim = this.#claims.get(ref.key)
    // Another holder's claim (this one's ran out, and the key was claimed again) stays for it.
    if (claim === undefined || claim.owner !== ref.owner) return undefined
    this.#claims.delete(ref.key)
    // A key's lifetime of the window less 1 ms needs a window of 2 ms at least.
    if (ref.attempt !== 1 || ref.rev !== 1 || times.replayWindowMs < 2) return undefined
    const record = completedFromClaim(claim.bytes, response, times.replayWindowMs, performance.now() - claim.sentAt)
    if (record === undefined) return undefined
    // The key expires 1 ms before the record, as every write sets it (lib/record.lua).
    const lifetime = String(times.replayWindowMs - 1)
    const socket = this.#connection.socket()
    const ifeq = socket !== this.#withoutIfeq
    const sent = ifeq
      ? this.#connection.sendRaw(this.#setIfEqual, ref.key, [record, 'IFEQ', claim.bytes, 'PX', lifetime])
      : this.#connection.sendRaw(this.#compareAndSet, ref.key, [claim.bytes, record, lifetime])
    return sent.then(
      (reply): TransitionResult | Promise<TransitionResult> => {
        if (reply === 'OK' || reply === 1) return { kind: TransitionReply.OK, rev: ref.rev + 1 }
        return fallback()
      },
      (error: unknown) => {
        // A refusal is an error reply to one command, or to a script that writes last: nothing
        // was written, and complete.lua answers (a layout-1 hash, a Redis at maxmemory, ...).
        if (error instanceof Error && error.name === 'ReplyError') {
          if (ifeq && NO_IFEQ.test(error.message)) this.#withoutIfeq = socket
          return fallback()
        }
        throw redisFault(error)
      },
    )
  }
}
