/**
 * The Redis store (docs/design.md §6): every operation is one call on one key: a function of
 * the store's Redis Functions library (FCALL, the library loaded again where a node lacks it),
 * or, where Redis refuses FUNCTION, a Lua script through ioredis script definitions (EVALSHA,
 * with ioredis itself re-sending as EVAL on NOSCRIPT); for a claim that needs no script, one
 * `SET ... NX GET PX`.
 *
 * This file only wires the rooms of this folder: options.ts (the options and their checks),
 * connection.ts (how a call is sent: failFast, coalesced writes), faults.ts (not applied or maybe
 * applied), fast-claim.ts (the claim and its sample of Redis's clock), replication.ts
 * (`durability`: WAIT, the touch, the give-back), watch.ts (the key watch for waiters),
 * operators.ts (read, replace, scan), with server-check.ts, script-calls.ts and replies.ts.
 */

import type { Cluster, Redis } from 'ioredis'
import { publishStoreEvent } from '../../core/channels.js'
import { encodeCause, type FailureCause } from '../../core/failure-cause.js'
import type { FailureKind } from '../../core/record.js'
import type * as Store from '../../core/store.js'
import { type MarkFailedArgs, StoreFront } from '../../core/store-front.js'
import { Connection } from './connection.js'
import { redisEndpoint } from './endpoint.js'
import { FastClaim } from './fast-claim.js'
import { redisFault } from './faults.js'
import { OneCommandCompletion } from './one-command.js'
import { readRecord, replaceRecord, scanRecords } from './operators.js'
import { type RedisStoreOptions, redisSettings } from './options.js'
import { Replication } from './replication.js'
import { decodeInspectReply, decodeRenewReply, decodeTransitionReply } from './replies.js'
import { ScriptCalls, type ScriptCommand, type ScriptMode } from './script-calls.js'
import { loadLibrary, loadScripts } from './script-loader.js'
import { type RedisServerReport, type RedisStoreEvent, ServerWatch } from './server-check.js'
import { connectionErrors, connects, unreachable } from './unreachable.js'
import { KeyWatch } from './watch.js'

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
  /** With `oneCommandCompletion`: the claims written without a script, completed with one command (one-command.ts). */
  readonly #oneCommand: OneCommandCompletion | undefined
  /** FCALL of the functions library, or the scripts where Redis refuses FUNCTION. */
  readonly #calls: ScriptCalls
  readonly #watch: ServerWatch
  /** The key watch for waiters (watch.ts). */
  readonly #keys: KeyWatch
  /** With `durability`: the waits for the replicas (replication.ts). */
  readonly #replication: Replication | undefined
  readonly #emit: (event: RedisStoreEvent) => void
  #closed = false

  /**
   * @param options see `RedisStoreOptions`.
   * @throws IdempotencyError `ERR_IDEM_INVALID_OPTION` for a missing client, an unknown option or
   *   a value out of range; `ERR_IDEM_SCRIPT_LOAD` when the scripts cannot be loaded.
   */
  constructor(options: RedisStoreOptions) {
    super()
    const {
      redis,
      keyPrefix,
      closeClient,
      failFast,
      unsafeEviction,
      onEvent,
      coalesceWrites,
      durability,
      functions,
      oneCommandCompletion,
    } = redisSettings(options)

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
    const oneCommand = oneCommandCompletion
      ? new OneCommandCompletion(this.#connection, calls.command('compare-and-set', scripts['compare-and-set']))
      : undefined
    this.#oneCommand = oneCommand
    this.#emit = (event) => {
      publishStoreEvent('redis', event)
      try {
        onEvent(event)
      } catch {
        // An observer never changes what the store does.
      }
    }
    this.#watch = new ServerWatch(redis, unsafeEviction, this.#emit)
    this.#claims = new FastClaim(this.#connection, this.#watch, claim, oneCommand)
    this.#keys = new KeyWatch(redis)
    this.#replication =
      durability === undefined
        ? undefined
        : new Replication({
            settings: durability,
            connection: this.#connection,
            calls,
            touch: scripts.touch,
            markFailed: (ref, kind, times) => this.#sendMarkFailed(ref, kind, times),
            store: this,
            emit: this.#emit,
          })
  }

  /** The record under `key` as stored, with Redis's clock: for operators (see operators.ts). */
  read(key: string): Promise<Store.ReadResult> {
    return readRecord(this.#redis, key)
  }

  /** Operators only: replaces (or deletes) the record if it is still `expected` (see `IdempotencyStore.replace`). */
  replace(key: string, expected: Store.RecordView, next: Store.RecordView | undefined): Promise<boolean> {
    return replaceRecord(this.#replace, key, expected, next)
  }

  /** Operators only: every record under this store's key prefix (see operators.ts). */
  scan(): AsyncIterable<Store.ScannedRecord> {
    return scanRecords(this.#redis, this.keyPrefix)
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
  async describe(): Promise<Store.StoreReport> {
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
      const durability = this.#replication?.settings
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

  /**
   * Checks the Redis server now (every master of a Cluster) with INFO: its `maxmemory-policy`,
   * and its `run_id`, remembered so that a later restart or failover is reported through
   * `onEvent`. Call it at startup to fail fast; the store also checks on every (re)connection.
   * @returns one report per server.
   * @throws IdempotencyError `ERR_IDEM_STORE_MISCONFIGURED` when a server's `maxmemory-policy`
   *   is not `noeviction` (or cannot be read) and `unsafeEviction` is `'refuse'`;
   *   `StoreUnavailableError` / `StoreIndeterminateError` when INFO cannot be sent or answered.
   */
  async verify(): Promise<readonly RedisServerReport[]> {
    let reports: readonly RedisServerReport[]
    const errors = connectionErrors(this.#redis)
    try {
      reports = await this.#watch.checkAll().catch(async (error: unknown) => {
        // Refused while the client connects (enableOfflineQueue: false): checked once it is up.
        if (errors.last() !== undefined || !(await connects(this.#redis))) throw error
        return this.#watch.checkAll()
      })
    } catch (error) {
      throw unreachable(this.#redis, error, errors.last()) ?? redisFault(error)
    } finally {
      errors.stop()
    }
    const refusal = this.#watch.refusal
    if (refusal !== undefined) throw refusal
    return reports
  }

  /** Calls `listener` when the record under `key` completes, fails, is released or replaced (see watch.ts). */
  watch(key: string, listener: () => void, ready?: () => void): () => void {
    return this.#keys.watch(key, listener, ready)
  }

  /** Where the server is, for telemetry (see endpoint.ts). */
  endpoint(): Store.StoreEndpoint | undefined {
    return redisEndpoint(this.#redis)
  }

  /**
   * Quits the client when `closeClient` is true; otherwise leaves it to its owner. The
   * connection `watch()` made is always closed.
   */
  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#watch.close()
    this.#keys.close()
    this.#replication?.close()
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
  protected doClaim(request: Store.ClaimRequest, admitted = false): Promise<Store.ClaimResult> {
    if (!admitted && !this.#claims.admitsNow()) {
      return this.#claims.admit().then(() => this.doClaim(request, true))
    }
    const replication = this.#replication
    if (replication === undefined) return this.#claims.claim(request)
    const sentOn = this.#connection.socket()
    return replication.claimed(request, sentOn, this.#claims.claim(request))
  }

  /**
   * inspect.lua: ARGV owner. With `durability`, what an inspect answers is acted on (a waiter
   * replays it, the undecided claims settle by it) only once a replica holds it: a master a
   * failover deposed would otherwise answer from records its resync then erases.
   */
  protected async doInspect(key: string, owner: string): Promise<Store.InspectResult> {
    const socket = this.#connection.socket()
    const found = decodeInspectReply(await this.#connection.send(this.#inspect, key, [owner]))
    const replication = this.#replication
    return replication === undefined ? found : replication.inspected(key, socket, found)
  }

  /** A transition, once the replicas acknowledged it where `durability` asks for that (replication.ts). */
  #durable(
    call: 'start' | 'complete' | 'markFailed' | 'release',
    key: string,
    sentOn: unknown,
    sent: Promise<Store.TransitionResult>,
  ): Promise<Store.TransitionResult> {
    const replication = this.#replication
    return replication === undefined ? sent : replication.durable(call, key, sentOn, sent)
  }

  /** start.lua: ARGV owner, attempt, rev, leaseMs, failureRetentionMs. */
  protected async doStart(ref: Store.OwnerRef, times: Store.RecordTimes): Promise<Store.TransitionResult> {
    const args = [
      ref.owner,
      String(ref.attempt),
      String(ref.rev),
      String(times.leaseMs),
      String(times.failureRetentionMs),
    ]
    this.#oneCommand?.forget(ref.key)
    const socket = this.#connection.socket()
    const sent = this.#connection
      .send(this.#start, ref.key, args)
      .then((reply) => decodeTransitionReply('start', reply))
    return this.#durable('start', ref.key, socket, sent)
  }

  /**
   * complete.lua: ARGV owner, attempt, rev, replayWindowMs, response; with `oneCommandCompletion`,
   * first one command fenced by the claim's bytes where this store claimed without a script
   * (one-command.ts), complete.lua where that writes nothing.
   */
  protected doComplete(
    ref: Store.OwnerRef,
    response: Uint8Array,
    times: Store.RecordTimes,
  ): Promise<Store.TransitionResult> {
    const script = (): Promise<Store.TransitionResult> => {
      const args = [ref.owner, String(ref.attempt), String(ref.rev), String(times.replayWindowMs), response]
      return this.#connection.send(this.#complete, ref.key, args).then(decodeCompleteReply)
    }
    const socket = this.#connection.socket()
    const sent = this.#oneCommand?.complete(ref, response, times, script) ?? script()
    return this.#durable('complete', ref.key, socket, sent)
  }

  /** mark-failed.lua: ARGV owner, attempt, rev, kind, failureRetentionMs, the cause's bytes. */
  protected doMarkFailed(...[ref, kind, times, cause]: MarkFailedArgs): Promise<Store.TransitionResult> {
    const socket = this.#connection.socket()
    return this.#durable('markFailed', ref.key, socket, this.#sendMarkFailed(ref, kind, times, cause))
  }

  #sendMarkFailed(
    ref: Store.OwnerRef,
    kind: FailureKind,
    times: Store.RecordTimes,
    cause?: FailureCause,
  ): Promise<Store.TransitionResult> {
    this.#oneCommand?.forget(ref.key)
    const kept = cause === undefined ? '' : encodeCause(cause)
    const args = [ref.owner, String(ref.attempt), String(ref.rev), kind, String(times.failureRetentionMs), kept]
    return this.#connection
      .send(this.#markFailed, ref.key, args)
      .then((reply) => decodeTransitionReply('mark-failed', reply))
  }

  /** release.lua: ARGV owner, attempt, rev. */
  protected doRelease(ref: Store.OwnerRef): Promise<Store.TransitionResult> {
    this.#oneCommand?.forget(ref.key)
    const args = [ref.owner, String(ref.attempt), String(ref.rev)]
    const socket = this.#connection.socket()
    const sent = this.#connection
      .send(this.#release, ref.key, args)
      .then((reply) => decodeTransitionReply('release', reply))
    return this.#durable('release', ref.key, socket, sent)
  }

  /** renew.lua: ARGV owner, attempt, leaseMs, failureRetentionMs (rev is not sent: renew ignores it). */
  protected async doRenew(ref: Store.OwnerRef, times: Store.RecordTimes): Promise<Store.RenewResult> {
    this.#oneCommand?.forget(ref.key)
    const args = [ref.owner, String(ref.attempt), String(times.leaseMs), String(times.failureRetentionMs)]
    return decodeRenewReply(await this.#connection.send(this.#renew, ref.key, args))
  }
}

function ignore(): void {}

function decodeCompleteReply(reply: unknown): Store.TransitionResult {
  return decodeTransitionReply('complete', reply)
}
