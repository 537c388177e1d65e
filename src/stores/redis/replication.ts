/**
 * The Redis store's `durability`: the replicas' acknowledgment of a call (Redis WAIT on the
 * call's connection, one in flight at a time: a group commit), the touch that puts a write of the
 * record ahead of a WAIT where the call wrote nothing on that connection, the shortfall's event
 * and error, and the give-back of a claim the replicas did not acknowledge (docs/durability.md).
 */
import type { Redis } from 'ioredis'
import { publishStoreEvent } from '../../core/channels.js'
import { bounded, DEFAULT_STORE_CALL_TIMEOUT_MS } from '../../core/deadline.js'
import { StoreUnavailableError } from '../../core/errors.js'
import { ClaimReply, FailureKind, TransitionReply } from '../../core/record.js'
import type * as Store from '../../core/store.js'
import { settleUndecidedClaim } from '../../core/undecided-claims.js'
import type { Connection } from './connection.js'
import type { DurabilitySettings } from './options.js'
import { isFunctionNotFound, loadOn, type ScriptCalls } from './script-calls.js'
import type { LoadedScript } from './script-loader.js'
import type { RedisStoreEvent } from './server-check.js'

/** How long a durability give-back keeps being re-sent until a replica acknowledges it, ms. */
const GIVE_BACK_MS = 120_000

/** The calls `durability` waits for the replicas after. */
type DurableCall = 'claim' | 'start' | 'complete' | 'markFailed' | 'release' | 'replay' | 'inspect'

/** What a durability shortfall means for each call, in its error's message. */
const shortfallConsequence: Record<DurableCall, string> = {
  claim: 'the claim was given back and nothing ran',
  start: 'it does not count as stored',
  complete: 'it does not count as stored',
  markFailed: 'it does not count as stored',
  release: 'it does not count as stored',
  replay: 'the stored answer is not handed out until a replica holds it',
  inspect: 'its answer is not acted on until a replica holds the record',
}

/** Sends a failure mark (mark-failed.lua), as the store's `markFailed` does, without waiting for the replicas. */
export type MarkFailed = (
  ref: Store.OwnerRef,
  kind: FailureKind,
  times: Store.RecordTimes,
) => Promise<Store.TransitionResult>

/** What `Replication` is made of: the store's pieces it sends with and reports to. */
export interface ReplicationParts {
  readonly settings: DurabilitySettings
  readonly connection: Connection
  /** How the store sends its operations: the touch goes the same way. */
  readonly calls: ScriptCalls
  readonly touch: LoadedScript
  readonly markFailed: MarkFailed
  /** The store, whose undecided claims a give-back never acknowledged joins. */
  readonly store: Store.IdempotencyStore
  readonly emit: (event: RedisStoreEvent) => void
}

/** The waits for the replicas of a store with `durability`. */
export class Replication {
  /** The checked `durability` option. */
  readonly settings: DurabilitySettings
  readonly #connection: Connection
  readonly #calls: ScriptCalls
  readonly #emit: (event: RedisStoreEvent) => void
  readonly #markFailed: MarkFailed
  readonly #store: Store.IdempotencyStore
  /** touch.lua, sent by hand (see `#sendTouch`). */
  readonly #touch: LoadedScript
  /** Whether touch.lua may be in the server's script cache: EVALSHA until a NOSCRIPT says not. */
  #touchCached = false
  /** Whether the touch's function may be on the server: FCALL alone until "Function not found" says not. */
  #touchLoaded = false
  /** The WAIT in flight, and the one that will follow it. */
  #waiting: Promise<number> | undefined
  #nextWait: Promise<number> | undefined
  /** Set by `close()`: the give-backs in the background stop. */
  #closed = false

  constructor(parts: ReplicationParts) {
    this.settings = parts.settings
    this.#connection = parts.connection
    this.#calls = parts.calls
    this.#emit = parts.emit
    this.#markFailed = parts.markFailed
    this.#store = parts.store
    this.#touch = parts.touch
  }

  /** The store closed: no give-back is re-sent. */
  close(): void {
    this.#closed = true
  }

  /**
   * A claim's result once the replicas acknowledged what it wrote or hands out: a replay only
   * with its record on a replica, and a claim that holds the scope given back (and failed, with
   * `onShortfall: 'fail'`) when too few acknowledged it.
   * @param sentOn the connection the claim went out on.
   */
  claimed(
    request: Store.ClaimRequest,
    sentOn: unknown,
    claimed: Promise<Store.ClaimResult>,
  ): Promise<Store.ClaimResult> {
    return claimed.then(async (result) => {
      // A replay hands out an answer: only one that the replicas hold. A master deposed by a
      // failover (paused, then back) can still hold a completion no replica got; replayed, that
      // answer would be lost at its resync (docs/durability.md).
      if (result.kind === ClaimReply.COMPLETED_REPLAY) {
        const refused = await this.#shortfall('replay', this.#acknowledged(request.key, sentOn, false))
        if (refused !== undefined) throw refused
        return result
      }
      if (!request.start) return result
      // Only a claim that holds the scope now wrote what a failover must keep; one that answers
      // REPLAYED_ACQUIRE holds it without having written now.
      if (
        result.kind !== ClaimReply.ACQUIRED &&
        result.kind !== ClaimReply.TAKEN_OVER &&
        result.kind !== ClaimReply.REPLAYED_ACQUIRE
      ) {
        return result
      }
      const acknowledged = this.#acknowledged(request.key, sentOn, result.kind !== ClaimReply.REPLAYED_ACQUIRE)
      const refused = await this.#shortfall('claim', acknowledged)
      if (refused === undefined) return result
      // Nothing ran: the hold is given back, so a retry may claim at once (the first round is
      // waited for), and durably: a claim that reached a replica while its give-back did not
      // would come back EXECUTING after a failover, under an owner that never runs.
      const ref = { key: request.key, owner: request.owner, attempt: result.attempt, rev: result.rev }
      await this.#giveBack(ref, request)
      throw refused
    })
  }

  /**
   * What an inspect answered, once a replica holds it: a waiter replays it and the undecided
   * claims settle by it, and a master a failover deposed would otherwise answer from records its
   * resync then erases.
   */
  async inspected(key: string, sentOn: unknown, found: Store.InspectResult): Promise<Store.InspectResult> {
    const refused = await this.#shortfall('inspect', this.#acknowledged(key, sentOn, false))
    if (refused !== undefined) throw refused
    return found
  }

  /**
   * A transition that must be acknowledged by the replicas: start, complete, and markFailed and
   * release (a failure mark or a give-back lost at a failover would leave the key EXECUTING on
   * the new master under an owner that never runs).
   */
  async durable(
    call: 'start' | 'complete' | 'markFailed' | 'release',
    key: string,
    sentOn: unknown,
    sent: Promise<Store.TransitionResult>,
  ): Promise<Store.TransitionResult> {
    const result = await sent
    if (result.kind !== TransitionReply.OK && result.kind !== TransitionReply.ALREADY) return result
    // ALREADY: a re-send found its effect there, written by an earlier send, maybe on an
    // earlier connection: the record is written again before the WAIT.
    const acknowledged = this.#acknowledged(key, sentOn, result.kind === TransitionReply.OK)
    const refused = await this.#shortfall(call, acknowledged)
    if (refused !== undefined) throw refused
    return result
  }

  /**
   * The replicas that acknowledged the call just sent: a WAIT on the same connection, behind
   * it. Group commit: at most one WAIT is in flight; the calls sent meanwhile (queued behind it
   * in Redis, since WAIT blocks the connection) share the one sent when it returns, so a
   * replica that is down costs one `timeoutMs` per round, not one per call. Resolves to -1 when
   * WAIT itself failed (counted as none).
   */
  #replicated(): Promise<number> {
    // The call was refused before it was sent: nothing to wait for, and nothing to queue.
    if (this.#connection.redis.status !== 'ready') return Promise.resolve(-1)
    if (this.#waiting === undefined) return this.#sendWait()
    if (this.#nextWait === undefined) {
      this.#nextWait = this.#waiting.then(() => {
        this.#nextWait = undefined
        return this.#sendWait()
      })
    }
    return this.#nextWait
  }

  #sendWait(): Promise<number> {
    const durability = this.settings
    const sent: Promise<number> = (this.#connection.redis as Redis)
      .wait(durability.replicas, durability.timeoutMs)
      .then(
        (count) => {
          if (this.#waiting === sent) this.#waiting = undefined
          return Number(count)
        },
        () => {
          if (this.#waiting === sent) this.#waiting = undefined
          return -1
        },
      )
    this.#waiting = sent
    return sent
  }

  /**
   * Waits for the replicas' acknowledgment of a call; too few are reported as a
   * `durability-shortfall` event. Resolves to the error the call must fail with
   * (`onShortfall: 'fail'`: unavailable, so the executor answers 503 or re-sends a completion),
   * or `undefined` when it stands.
   */
  async #shortfall(call: DurableCall, acknowledged: Promise<number>): Promise<StoreUnavailableError | undefined> {
    const durability = this.settings
    const count = Math.max(0, await acknowledged)
    if (count >= durability.replicas) return undefined
    this.#emit({
      type: 'durability-shortfall',
      call,
      replicas: durability.replicas,
      acknowledged: count,
      action: durability.fail ? 'failed' : 'warned',
      message: `${count} of ${durability.replicas} Redis replicas acknowledged the ${call} within ${durability.timeoutMs} ms`,
    })
    if (!durability.fail) return undefined
    return new StoreUnavailableError(
      `Only ${count} of ${durability.replicas} Redis replicas acknowledged the ${call} within ` +
        `${durability.timeoutMs} ms (durability); ${shortfallConsequence[call]}.`,
    )
  }

  /**
   * Gives a claim back after a durability shortfall (FAILED_RETRYABLE: nothing ran) until a
   * replica acknowledged the give-back too. The first round is awaited; the rest go on in the
   * background, with growing pauses (100 ms doubling to 2 s, for about two minutes): re-sent
   * after a failover, the give-back finds the claim the new master kept and marks it, or finds
   * the record changed or gone and stops. A give-back never acknowledged is handed to the
   * undecided claims (src/core/undecided-claims.ts), settled once Redis answers.
   */
  async #giveBack(ref: Store.OwnerRef, times: Store.RecordTimes): Promise<void> {
    const round = async (): Promise<boolean> => {
      try {
        const sentOn = this.#connection.socket()
        const given = await bounded(
          'markFailed',
          DEFAULT_STORE_CALL_TIMEOUT_MS,
          this.#markFailed(ref, FailureKind.RETRYABLE, times),
        )
        // Changed or gone since (taken over, resolved, expired, or never replicated): not ours to give.
        if (given.kind !== TransitionReply.OK && given.kind !== TransitionReply.ALREADY) return true
        const count = await this.#acknowledged(ref.key, sentOn, given.kind === TransitionReply.OK)
        return count >= this.settings.replicas
      } catch {
        return false
      }
    }
    if (await round()) return
    const giveUpAt = performance.now() + GIVE_BACK_MS
    let delay = 100
    const again = () => {
      const timer = setTimeout(async () => {
        if (this.#closed) return
        if (await round()) return
        delay = Math.min(delay * 2, 2_000)
        if (performance.now() < giveUpAt) return again()
        settleUndecidedClaim(this.#store, {
          key: ref.key,
          owner: ref.owner,
          times,
          callTimeoutMs: DEFAULT_STORE_CALL_TIMEOUT_MS,
          emit: (event) => publishStoreEvent('redis', { ...event, during: 'durability give-back' }),
        })
      }, delay)
      timer.unref()
    }
    again()
  }

  /**
   * The replicas that acknowledged the record under `key`, correct by construction on every
   * Redis version (docs/durability.md): the WAIT goes out on the connection after the call's
   * reply, behind a write of the record on that same connection whenever the call may not
   * have written there (it answered without writing: ALREADY, REPLAYED_ACQUIRE; or the
   * connection is not the one the call went out on: a re-send after a reconnect). A WAIT whose
   * connection changed before it was answered, or whose touch did not write before it (the
   * touch failed, or met NOSCRIPT and so ran nothing ahead of the WAIT), is void: the touch and
   * the WAIT are redone, at most twice more, then counted as none. Resolves to -1 when none
   * could be had.
   */
  async #acknowledged(key: string, sentOn: unknown, wrote: boolean): Promise<number> {
    let covered = wrote
    for (let round = 0; round < 3; round++) {
      const socket = this.#connection.socket()
      if (this.#connection.redis.status !== 'ready' || socket === undefined) return -1
      // A touch, then the WAIT behind it on the same connection.
      const touched = covered && socket === sentOn ? undefined : this.#sendTouch(key)
      const count = await this.#replicated()
      const touchedOk = touched === undefined ? true : await touched
      if (this.#connection.socket() === socket && touchedOk) return count
      covered = false
    }
    return -1
  }

  /**
   * touch.lua, as one command that is never sent again behind the caller's back: ioredis re-sends
   * a defined script that meets NOSCRIPT as EVAL once the error is back, which is after a WAIT
   * pipelined behind it, so the WAIT would run before the write it is meant to follow
   * (docs/durability.md). Here a NOSCRIPT fails the touch (its WAIT is void) and the next touch
   * goes as EVAL, which loads the script again. Resolves to whether the touch ran.
   */
  #sendTouch(key: string): Promise<boolean> {
    if (!this.#connection.mayWrite()) return Promise.resolve(false)
    if (this.#calls.functions) return this.#sendTouchFunction(key)
    const script = this.#touch
    const cached = this.#touchCached
    try {
      return (this.#connection.redis as Redis)
        .call(cached ? 'evalsha' : 'eval', cached ? script.sha1 : script.lua, 1, key)
        .then(
          () => {
            this.#touchCached = true
            return true
          },
          (error: unknown) => {
            if (error instanceof Error && error.message.includes('NOSCRIPT')) this.#touchCached = false
            return false
          },
        )
    } catch {
      return Promise.resolve(false)
    }
  }

  /**
   * The touch as FCALL, never sent again: "Function not found" fails it (its WAIT is void) as
   * NOSCRIPT does the script's, and the next touch goes behind a FUNCTION LOAD on the same
   * connection, ahead of its WAIT. A refusal of FUNCTION or FCALL fails it too, and turns the
   * store to scripts.
   */
  #sendTouchFunction(key: string): Promise<boolean> {
    const redis = this.#connection.redis as Redis
    const library = this.#calls.library
    try {
      if (!this.#touchLoaded) loadOn(redis, library).catch((error: unknown) => this.#calls.refused(error))
      return redis.call('fcall', library.functions.touch, 1, key).then(
        () => {
          this.#touchLoaded = true
          return true
        },
        (error: unknown) => {
          if (isFunctionNotFound(error)) this.#touchLoaded = false
          else this.#calls.refused(error)
          return false
        },
      )
    } catch {
      return Promise.resolve(false)
    }
  }
}
