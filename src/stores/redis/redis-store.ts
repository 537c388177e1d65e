/**
 * The Redis store (docs/design.md §6): every operation is one call on one key: a function of
 * the store's Redis Functions library (FCALL, the library loaded again where a node lacks it),
 * or, where Redis refuses FUNCTION, a Lua script through ioredis script definitions (EVALSHA,
 * with ioredis itself re-sending as EVAL on NOSCRIPT); for a claim that needs no script, one
 * `SET ... NX GET PX`.
 */

import type { Cluster, Redis } from 'ioredis'
import { publishStoreEvent } from '../../core/channels.js'
import { bounded, DEFAULT_STORE_CALL_TIMEOUT_MS } from '../../core/deadline.js'
import { StoreProtocolError, StoreUnavailableError } from '../../core/errors.js'
import { ClaimReply, FailureKind, TransitionReply } from '../../core/record.js'
import type {
  ClaimRequest,
  ClaimResult,
  InspectResult,
  OwnerRef,
  ReadResult,
  RecordTimes,
  RecordView,
  RenewResult,
  ScannedRecord,
  StoreEndpoint,
  StoreReport,
  TransitionResult,
} from '../../core/store.js'
import { checkKey } from '../../core/store-args.js'
import { StoreFront } from '../../core/store-front.js'
import { settleUndecidedClaim } from '../../core/undecided-claims.js'
import { KeyListeners } from '../key-listeners.js'
import { decodeRecord, encodeRecord, RECORD_HEADER_BYTES } from '../record-layout.js'
import { Connection } from './connection.js'
import { redisEndpoint } from './endpoint.js'
import { FastClaim } from './fast-claim.js'
import { redisFault } from './faults.js'
import { type DurabilitySettings, type RedisStoreOptions, redisSettings } from './options.js'
import { decodeInspectReply, decodeRenewReply, decodeTransitionReply } from './replies.js'
import { isFunctionNotFound, loadOn, ScriptCalls, type ScriptCommand, type ScriptMode } from './script-calls.js'
import { type LoadedScript, loadLibrary, loadScripts } from './script-loader.js'
import { type RedisServerReport, type RedisStoreEvent, ServerWatch } from './server-check.js'
import { connectionErrors, unreachable } from './unreachable.js'

/** How long a durability give-back keeps being re-sent until a replica acknowledges it, ms. */
const GIVE_BACK_MS = 120_000

/** A script defined on the client: `(key, ...argv) => reply`. */

/** The Redis store. Create it with `redisStore()`. */
export class RedisStore extends StoreFront {
  readonly name = 'redis'
  readonly keyPrefix: string
  readonly #redis: Redis | Cluster
  readonly #closeClient: boolean
  readonly #connection: Connection
  /** The claim (fast-claim.ts): SET NX GET where it can, claim.lua otherwise, and its clock sample. */
  readonly #claims: FastClaim
  readonly #inspect: ScriptCommand
  readonly #start: ScriptCommand
  readonly #complete: ScriptCommand
  readonly #markFailed: ScriptCommand
  readonly #release: ScriptCommand
  readonly #renew: ScriptCommand
  readonly #replace: ScriptCommand
  /** touch.lua, sent by hand (see `#sendTouch`). */
  readonly #touch: LoadedScript
  /** Whether touch.lua may be in the server's script cache: EVALSHA until a NOSCRIPT says not. */
  #touchCached = false
  /** FCALL of the functions library, or the scripts where Redis refuses FUNCTION. */
  readonly #calls: ScriptCalls
  /** Whether the touch's function may be on the server: FCALL alone until "Function not found" says not. */
  #touchLoaded = false
  readonly #watch: ServerWatch
  /** The connection `watch()` subscribes on, made on first use; its listeners by channel. */
  #subscriber: Redis | Cluster | undefined
  readonly #listeners = new KeyListeners()
  /** Channel → its SSUBSCRIBE, settled once the subscription is active (or failed). */
  readonly #subscribed = new Map<string, Promise<void>>()
  readonly #durability: DurabilitySettings | undefined
  readonly #emit: (event: RedisStoreEvent) => void
  #closed = false

  /**
   * @param options see `RedisStoreOptions`.
   * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for a missing client, an unknown option or
   *   a value out of range; `ERR_IDEM_SCRIPT_LOAD` when the scripts cannot be loaded.
   */
  constructor(options: RedisStoreOptions) {
    super()
    const { redis, keyPrefix, closeClient, failFast, unsafeEviction, onEvent, coalesceWrites, durability, functions } =
      redisSettings(options)
    this.#durability = durability

    this.keyPrefix = keyPrefix
    this.#redis = redis
    this.#closeClient = closeClient
    this.#connection = new Connection(redis, failFast, coalesceWrites)
    const scripts = loadScripts()
    this.#calls = new ScriptCalls(redis, loadLibrary(), functions, (reason) =>
      this.#emit({
        type: 'scripts-instead-of-functions',
        reason,
        message: `Redis refused FUNCTION or FCALL (${reason}): this store sends its operations as EVALSHA scripts.`,
      }),
    )
    const calls = this.#calls
    // Claim and inspect can hand back a stored response, which is bytes: their Buffer variants.
    const claim = calls.command('claim', scripts.claim, true)
    this.#inspect = calls.command('inspect', scripts.inspect, true)
    this.#start = calls.command('start', scripts.start)
    this.#complete = calls.command('complete', scripts.complete)
    this.#markFailed = calls.command('mark-failed', scripts['mark-failed'])
    this.#release = calls.command('release', scripts.release)
    this.#renew = calls.command('renew', scripts.renew)
    this.#replace = calls.command('replace', scripts.replace)
    this.#touch = scripts.touch
    this.#emit = (event) => {
      publishStoreEvent('redis', event)
      try {
        onEvent(event)
      } catch {
        // An observer never changes what the store does.
      }
    }
    this.#watch = new ServerWatch(redis, unsafeEviction, this.#emit)
    this.#claims = new FastClaim(this.#connection, this.#watch, claim)
  }

  /**
   * Checks the Redis server now (every master of a Cluster) with INFO: its `maxmemory-policy`,
   * and its `run_id`, remembered so that a later restart or failover is reported through
   * `onEvent`. Call it at startup to fail fast; the store also checks on every (re)connection.
   * @returns one report per server.
   * @throws IdempotencyError `ERR_IDEM_STORE_MISCONFIGURED` when a server's `maxmemory-policy`
   *   is not `noeviction` (or cannot be read) and `unsafeEviction` is `'refuse'`;
   *   `StoreUnavailableError` / `StoreIndeterminateError` when INFO cannot be sent or answered.
   */
  /**
   * The record under `key` as stored (record layout 2), live or not, with Redis's clock: for
   * operators (`idemkit inspect`). A layout-1 record (a hash, written by 0.1) is refused with
   * StoreProtocolError.
   */
  async read(key: string): Promise<ReadResult> {
    checkKey(key)
    let time: readonly (number | string)[]
    let bytes: Buffer | null
    let expireTime: number
    try {
      ;[time, bytes, expireTime] = await Promise.all([
        this.#redis.time(),
        this.#redis.getBuffer(key),
        this.#redis.pexpiretime(key),
      ])
    } catch (error) {
      if (error instanceof Error && error.message.startsWith('WRONGTYPE')) {
        throw new StoreProtocolError('The record is in layout 1 (a hash, written by 0.1); read it with HGETALL.')
      }
      throw redisFault(error)
    }
    const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000)
    return { record: bytes === null ? undefined : decodeRecord(bytes, expireTime), now }
  }

  /** Operators only: replaces (or deletes) the record if it is still `expected` (see `IdempotencyStore.replace`). */
  async replace(key: string, expected: RecordView, next: RecordView | undefined): Promise<boolean> {
    checkKey(key)
    const header = encodeRecord(expected).subarray(0, RECORD_HEADER_BYTES)
    const args: (Buffer | string)[] =
      next === undefined ? [header, '', '0'] : [header, encodeRecord(next), String(next.expiresAt)]
    try {
      return (await this.#replace(key, ...args)) === 1
    } catch (error) {
      throw redisFault(error)
    }
  }

  /**
   * Operators only: every record under this store's key prefix, by SCAN (on a Cluster, on every
   * master), read in batches with Redis's clock. A layout-1 record (a hash) is skipped.
   */
  async *scan(): AsyncIterable<ScannedRecord> {
    const client = this.#redis
    const nodes = client.isCluster ? (client as Cluster).nodes('master') : [client as Redis]
    for (const node of nodes) {
      const clientPrefix = node.options.keyPrefix ?? ''
      const pattern = `${clientPrefix}${this.keyPrefix}:idem:*`
      let cursor = '0'
      do {
        let keys: string[]
        let replies: [Error | null, unknown][] | null
        try {
          ;[cursor, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 500)
          const pipeline = node.pipeline().time()
          // The client adds its own prefix to every command: the keys SCAN gave carry it already.
          for (const key of keys) {
            pipeline.getBuffer(key.slice(clientPrefix.length)).pexpiretime(key.slice(clientPrefix.length))
          }
          replies = await pipeline.exec()
        } catch (error) {
          throw redisFault(error)
        }
        if (replies === null) throw redisFault(new Error('The scan pipeline was discarded.'))
        const time = replies[0]?.[1] as (string | number)[]
        const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000)
        for (const [index, key] of keys.entries()) {
          const [error, bytes] = replies[2 * index + 1] ?? [null, null]
          if (error !== null || !Buffer.isBuffer(bytes)) continue
          const expireTime = replies[2 * index + 2]?.[1]
          yield {
            key: key.slice(clientPrefix.length),
            record: decodeRecord(bytes, typeof expireTime === 'number' ? expireTime : undefined),
            now,
          }
        }
      } while (cursor !== '0')
    }
  }

  /**
   * The startup report: Redis's version, how it is deployed (standalone, Sentinel, Cluster),
   * and per server the eviction policy and whether it writes an append-only file, with a
   * warning for each setting that can lose records; with `durability`, the replicas connected,
   * and a warning when there are fewer than it asks for; `operations` when Redis refused
   * FUNCTION and the store sends scripts (it loads its functions library here, so that is
   * decided at startup). Waits for the client to connect.
   * @throws StoreUnavailableError / StoreIndeterminateError when Redis cannot be asked.
   */
  async describe(): Promise<StoreReport> {
    let reports: readonly RedisServerReport[]
    try {
      reports = await this.#watch.checkAll()
    } catch (error) {
      throw redisFault(error)
    }
    // Decides now, at startup, whether the store sends FCALL or scripts (loading the library).
    await this.#calls.load().catch(ignore)
    const client = this.#redis
    const mode = client.isCluster ? 'cluster' : (client as Redis).options.sentinels ? 'sentinel' : 'standalone'
    const warnings: string[] = []
    const settings: Record<string, string | boolean> = {}
    const calls = this.#calls.report()
    if (calls.mode === 'scripts') settings.operations = `EVALSHA scripts (${calls.reason})`
    for (const report of reports) {
      settings[`${report.node} maxmemory-policy`] = report.maxmemoryPolicy
      settings[`${report.node} appendonly`] = report.aofEnabled
      if (report.maxmemoryPolicy !== 'noeviction') {
        warnings.push(`${report.node}: maxmemory-policy is ${report.maxmemoryPolicy}: Redis may evict records early`)
      }
      if (!report.aofEnabled) {
        warnings.push(
          `${report.node}: appendonly is off: a Redis restart loses the records written since its last snapshot`,
        )
      }
      const durability = this.#durability
      if (durability !== undefined) {
        settings[`${report.node} connected replicas`] = String(report.replicas)
        if (report.replicas < durability.replicas) {
          warnings.push(
            `${report.node}: durability asks for ${durability.replicas} replica(s) and ${report.replicas} is connected: ` +
              (durability.fail
                ? 'claims will answer 503 until enough replicas are connected'
                : 'answers will not survive a failover'),
          )
        }
      }
    }
    return { store: this.name, version: reports[0]?.version, mode, settings, warnings }
  }

  /** How the store sends its operations now: FCALL of its library, or EVALSHA scripts and why. */
  scriptMode(): ScriptMode {
    return this.#calls.report()
  }

  async verify(): Promise<readonly RedisServerReport[]> {
    let reports: readonly RedisServerReport[]
    const errors = connectionErrors(this.#redis)
    try {
      reports = await this.#watch.checkAll()
    } catch (error) {
      throw unreachable(this.#redis, error, errors.last()) ?? redisFault(error)
    } finally {
      errors.stop()
    }
    const refusal = this.#watch.refusal
    if (refusal !== undefined) throw refusal
    return reports
  }

  /**
   * Calls `listener` when the record under `key` completes, fails, is released or replaced, on
   * any instance: the scripts that end an execution SPUBLISH on the channel named like the key,
   * and this store SSUBSCRIBEs to it on a connection of its own (a duplicate of the client, made
   * on first use; on a Cluster with `shardedSubscribers`, one per master). Redis pub/sub is at
   * most once: a message sent while that connection reconnects is lost, and the waiters' poll
   * covers it.
   */
  watch(key: string, listener: () => void, ready?: () => void): () => void {
    checkKey(key)
    const subscriber = this.#subscriberConnection()
    // The channel as Redis names it in its messages: with the client's own key prefix.
    const channel = `${this.#redis.options.keyPrefix ?? ''}${key}`
    const stop = this.#listeners.add(
      channel,
      listener,
      // SSUBSCRIBE is answered once the subscription is active: `ready` follows that answer
      // (or its failure: then the poll alone decides).
      () => this.#subscribed.set(channel, subscriber.ssubscribe(key).then(ignore, ignore)),
      () => {
        this.#subscribed.delete(channel)
        if (!this.#closed) subscriber.sunsubscribe(key).catch(ignore)
      },
    )
    if (ready !== undefined) void (this.#subscribed.get(channel) ?? Promise.resolve()).then(ready)
    return stop
  }

  #subscriberConnection(): Redis | Cluster {
    if (this.#subscriber !== undefined) return this.#subscriber
    const client = this.#redis
    // Subscriptions wait in the offline queue until the connection is up, and ioredis
    // subscribes again after every reconnection.
    const subscriber = client.isCluster
      ? (client as Cluster).duplicate(undefined, { shardedSubscribers: true, enableOfflineQueue: true })
      : (client as Redis).duplicate({ enableOfflineQueue: true, lazyConnect: false })
    subscriber.on('error', ignore)
    subscriber.on('smessage', (channel: string) => this.#listeners.notify(channel))
    this.#subscriber = subscriber
    return subscriber
  }

  /**
   * Quits the client when `closeClient` is true; otherwise leaves it to its owner. The
   * connection `watch()` made is always closed.
   */
  /** Where the server is, for telemetry (see endpoint.ts). */
  endpoint(): StoreEndpoint | undefined {
    return redisEndpoint(this.#redis)
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#watch.close()
    this.#listeners.clear()
    this.#subscriber?.disconnect()
    if (!this.#closeClient || this.#redis.status === 'end') return
    try {
      await this.#redis.quit()
    } catch {
      // QUIT cannot be sent on a broken connection: drop it instead.
      this.#redis.disconnect()
    }
  }

  // One method per script: ARGV in the order of the script's header, then the strict decoder.

  /**
   * claim.lua: ARGV owner, fingerprint, start, expiredExecution, leaseMs, failureRetentionMs,
   * the packed codec/policy/op, wait, legacy fingerprints... Once the server check is done and nothing is
   * refused (every claim but the first), it is sent without waiting for anything.
   * @param admitted true once `FastClaim.admit()` let it through: it is sent then, whatever the
   *   server check found meanwhile (a check that could not run decides nothing).
   */
  protected doClaim(request: ClaimRequest, admitted = false): Promise<ClaimResult> {
    if (!admitted && !this.#claims.admitsNow()) {
      return this.#claims.admit().then(() => this.doClaim(request, true))
    }
    const durability = this.#durability
    const socket = this.#connection.socket()
    const claimed = this.#claims.claim(request)
    if (durability === undefined) return claimed
    return claimed.then(async (result) => {
      // A replay hands out an answer: only one that the replicas hold. A master deposed by a
      // failover (paused, then back) can still hold a completion no replica got; replayed, that
      // answer would be lost at its resync (docs/durability.md).
      if (result.kind === ClaimReply.COMPLETED_REPLAY) {
        const refused = await this.#shortfall(
          'replay',
          durability,
          this.#acknowledged(durability, request.key, socket, false),
        )
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
      const acknowledged = this.#acknowledged(
        durability,
        request.key,
        socket,
        result.kind !== ClaimReply.REPLAYED_ACQUIRE,
      )
      const refused = await this.#shortfall('claim', durability, acknowledged)
      if (refused === undefined) return result
      // Nothing ran: the hold is given back, so a retry may claim at once (the first round is
      // waited for), and durably: a claim that reached a replica while its give-back did not
      // would come back EXECUTING after a failover, under an owner that never runs.
      const ref = { key: request.key, owner: request.owner, attempt: result.attempt, rev: result.rev }
      await this.#giveBack(ref, request, durability)
      throw refused
    })
  }

  /** The WAIT in flight, and the one that will follow it. */
  #waiting: Promise<number> | undefined
  #nextWait: Promise<number> | undefined

  /**
   * The replicas that acknowledged the call just sent: a WAIT on the same connection, behind
   * it. Group commit: at most one WAIT is in flight; the calls sent meanwhile (queued behind it
   * in Redis, since WAIT blocks the connection) share the one sent when it returns, so a
   * replica that is down costs one `timeoutMs` per round, not one per call. Resolves to -1 when
   * WAIT itself failed (counted as none).
   */
  #replicated(durability: DurabilitySettings): Promise<number> {
    // The call was refused before it was sent: nothing to wait for, and nothing to queue.
    if (this.#redis.status !== 'ready') return Promise.resolve(-1)
    if (this.#waiting === undefined) return this.#sendWait(durability)
    if (this.#nextWait === undefined) {
      this.#nextWait = this.#waiting.then(() => {
        this.#nextWait = undefined
        return this.#sendWait(durability)
      })
    }
    return this.#nextWait
  }

  #sendWait(durability: DurabilitySettings): Promise<number> {
    const sent: Promise<number> = (this.#redis as Redis).wait(durability.replicas, durability.timeoutMs).then(
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
  async #shortfall(
    call: DurableCall,
    durability: DurabilitySettings,
    acknowledged: Promise<number>,
  ): Promise<StoreUnavailableError | undefined> {
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
  async #giveBack(ref: OwnerRef, times: RecordTimes, durability: DurabilitySettings): Promise<void> {
    const round = async (): Promise<boolean> => {
      try {
        const sentOn = this.#connection.socket()
        const given = await bounded(
          'markFailed',
          DEFAULT_STORE_CALL_TIMEOUT_MS,
          this.#sendMarkFailed(ref, FailureKind.RETRYABLE, times),
        )
        // Changed or gone since (taken over, resolved, expired, or never replicated): not ours to give.
        if (given.kind !== TransitionReply.OK && given.kind !== TransitionReply.ALREADY) return true
        const count = await this.#acknowledged(durability, ref.key, sentOn, given.kind === TransitionReply.OK)
        return count >= durability.replicas
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
        settleUndecidedClaim(this, {
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
  async #acknowledged(durability: DurabilitySettings, key: string, sentOn: unknown, wrote: boolean): Promise<number> {
    let covered = wrote
    for (let round = 0; round < 3; round++) {
      const socket = this.#connection.socket()
      if (this.#redis.status !== 'ready' || socket === undefined) return -1
      // A touch, then the WAIT behind it on the same connection.
      const touched = covered && socket === sentOn ? undefined : this.#sendTouch(key)
      const count = await this.#replicated(durability)
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
      return (this.#redis as Redis).call(cached ? 'evalsha' : 'eval', cached ? script.sha1 : script.lua, 1, key).then(
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
    const redis = this.#redis as Redis
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

  /**
   * A transition that must be acknowledged by the replicas: start, complete, and markFailed and
   * release (a failure mark or a give-back lost at a failover would leave the key EXECUTING on
   * the new master under an owner that never runs).
   */
  async #durable(
    call: 'start' | 'complete' | 'markFailed' | 'release',
    key: string,
    sentOn: unknown,
    sent: Promise<TransitionResult>,
  ): Promise<TransitionResult> {
    const durability = this.#durability
    if (durability === undefined) return sent
    const result = await sent
    if (result.kind !== TransitionReply.OK && result.kind !== TransitionReply.ALREADY) return result
    // ALREADY: a re-send found its effect there, written by an earlier send, maybe on an
    // earlier connection: the record is written again before the WAIT.
    const acknowledged = this.#acknowledged(durability, key, sentOn, result.kind === TransitionReply.OK)
    const refused = await this.#shortfall(call, durability, acknowledged)
    if (refused !== undefined) throw refused
    return result
  }

  /**
   * inspect.lua: ARGV owner. With `durability`, what an inspect answers is acted on (a waiter
   * replays it, the undecided claims settle by it) only once a replica holds it: a master a
   * failover deposed would otherwise answer from records its resync then erases.
   */
  protected async doInspect(key: string, owner: string): Promise<InspectResult> {
    const socket = this.#connection.socket()
    const found = decodeInspectReply(await this.#connection.send(this.#inspect, key, [owner]))
    const durability = this.#durability
    if (durability === undefined) return found
    const refused = await this.#shortfall('inspect', durability, this.#acknowledged(durability, key, socket, false))
    if (refused !== undefined) throw refused
    return found
  }

  /** start.lua: ARGV owner, attempt, rev, leaseMs, failureRetentionMs. */
  protected async doStart(ref: OwnerRef, times: RecordTimes): Promise<TransitionResult> {
    const args = [
      ref.owner,
      String(ref.attempt),
      String(ref.rev),
      String(times.leaseMs),
      String(times.failureRetentionMs),
    ]
    const socket = this.#connection.socket()
    const sent = this.#connection
      .send(this.#start, ref.key, args)
      .then((reply) => decodeTransitionReply('start', reply))
    return this.#durable('start', ref.key, socket, sent)
  }

  /** complete.lua: ARGV owner, attempt, rev, replayWindowMs, response. */
  protected doComplete(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult> {
    const args = [ref.owner, String(ref.attempt), String(ref.rev), String(times.replayWindowMs), response]
    const socket = this.#connection.socket()
    return this.#durable(
      'complete',
      ref.key,
      socket,
      this.#connection.send(this.#complete, ref.key, args).then(decodeCompleteReply),
    )
  }

  /** mark-failed.lua: ARGV owner, attempt, rev, kind, failureRetentionMs. */
  protected doMarkFailed(ref: OwnerRef, kind: FailureKind, times: RecordTimes): Promise<TransitionResult> {
    const socket = this.#connection.socket()
    return this.#durable('markFailed', ref.key, socket, this.#sendMarkFailed(ref, kind, times))
  }

  #sendMarkFailed(ref: OwnerRef, kind: FailureKind, times: RecordTimes): Promise<TransitionResult> {
    const args = [ref.owner, String(ref.attempt), String(ref.rev), kind, String(times.failureRetentionMs)]
    return this.#connection
      .send(this.#markFailed, ref.key, args)
      .then((reply) => decodeTransitionReply('mark-failed', reply))
  }

  /** release.lua: ARGV owner, attempt, rev. */
  protected doRelease(ref: OwnerRef): Promise<TransitionResult> {
    const args = [ref.owner, String(ref.attempt), String(ref.rev)]
    const socket = this.#connection.socket()
    const sent = this.#connection
      .send(this.#release, ref.key, args)
      .then((reply) => decodeTransitionReply('release', reply))
    return this.#durable('release', ref.key, socket, sent)
  }

  /** renew.lua: ARGV owner, attempt, leaseMs, failureRetentionMs (rev is not sent: renew ignores it). */
  protected async doRenew(ref: OwnerRef, times: RecordTimes): Promise<RenewResult> {
    const args = [ref.owner, String(ref.attempt), String(times.leaseMs), String(times.failureRetentionMs)]
    return decodeRenewReply(await this.#connection.send(this.#renew, ref.key, args))
  }
}

function ignore(): void {}

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

function decodeCompleteReply(reply: unknown): TransitionResult {
  return decodeTransitionReply('complete', reply)
}
