/**
 * The Redis store's claim: where no script is needed, one `SET ... NX GET PX` and what the record
 * it hands back proves (docs/design.md §6, "A claim without a script"), judged by
 * src/core/rules.ts with the bound of Redis's clock kept here (`ClockSampler`, on redis-clock.ts);
 * claim.lua for everything else; and the admission of claims while the server check refuses.
 * The claim rule decides nothing here: its copies are `foundAnswer` and `runningAnswer` (this
 * path's) and `claimStep` in src/core/rules.ts, scripts/claim.lua, and the PL/pgSQL
 * `<table>_claim_v4` in src/stores/postgres/sql/functions/2-operations.sql (the map is rules.ts's
 * header).
 */
import { StoreUnavailableError } from '../../core/errors.js'
import { ClaimReply, RecordState } from '../../core/record.js'
import { type FoundRecord, foundAnswer, RUNNING, runningAnswer } from '../../core/rules.js'
import type { ClaimRequest, ClaimResult } from '../../core/store.js'
import {
  decodeRecord,
  encodeFreshClaim,
  packClaimTexts,
  RECORD_LAYOUT,
  RELATIVE_LAYOUT,
  recordFingerprint,
  recordState,
  type StoredRecord,
} from '../record-layout.js'
import type { Connection } from './connection.js'
import { redisFault } from './faults.js'
import { sendCommand } from './framed.js'
import type { OneCommandCompletion } from './one-command.js'
import {
  type ClockSample,
  certainLeaseLeftMs,
  nextSample,
  redisTimeAtLeast,
  redisTimeAtMost,
  SAMPLE_REFRESH_MS,
  sampleDue,
} from './redis-clock.js'
import { decodeClaimReply } from './replies.js'
import type { ScriptCommand } from './script-calls.js'
import type { ServerWatch } from './server-check.js'

/**
 * For this long (ms) after a fast claim found a running record, or a COMPLETED one in layout 4,
 * the store's claims send `PEXPIRETIME` behind their SET, so a duplicate is answered
 * IN_PROGRESS, or the replay given, without the script or a second round trip.
 */
const RUNNING_SEEN_MS = 1_000

/** A refusal of TIME by Redis's ACL or a proxy before it: the store keeps no clock sample then. */
const TIME_REFUSED = /^(NOPERM\b|ERR (unknown (sub)?command|unsupported command|command not supported)\b)/i

/** The claim: the fast path, claim.lua behind it, and the admission of claims. */
export class FastClaim {
  readonly #connection: Connection
  readonly #watch: ServerWatch
  /** claim.lua (as FCALL or a script), its reply as bytes: it can hand back a stored response. */
  readonly #claim: ScriptCommand
  /** SET, its reply as bytes: the claim without a script (PEXPIRETIME behind it only where `#expiryWanted`). */
  readonly #set: ScriptCommand
  readonly #pexpiretime: ScriptCommand
  readonly #clock: ClockSampler
  /** When a fast claim that would not wait last found a running record (local monotonic ms). */
  #runningSeenAt = Number.NEGATIVE_INFINITY
  /** When a fast claim last found a COMPLETED record in layout 4 (local monotonic ms). */
  #relativeSeenAt = Number.NEGATIVE_INFINITY

  /** Told of every record a claim wrote without a script: the one-command completion's claims (one-command.ts). */
  readonly #oneCommand: Pick<OneCommandCompletion, 'claimed'> | undefined

  constructor(
    connection: Connection,
    watch: ServerWatch,
    claim: ScriptCommand,
    oneCommand?: Pick<OneCommandCompletion, 'claimed'>,
  ) {
    const redis = connection.redis
    this.#connection = connection
    this.#watch = watch
    this.#claim = claim
    this.#oneCommand = oneCommand
    this.#set = (key, ...args) => sendCommand(redis, 'set', [key, ...args], true)
    this.#pexpiretime = (key) => redis.pexpiretime(key)
    this.#clock = new ClockSampler(connection)
  }

  /**
   * Whether a claim may be sent at once: the server check is done and refuses nothing (every
   * claim but the first). Otherwise it goes through `admit()` first.
   */
  admitsNow(): boolean {
    return this.#watch.isReady && this.#watch.refusal === undefined
  }

  /**
   * Admits a claim, the only call that creates records: the first one waits for the server
   * check, and while the eviction policy is refused (`unsafeEviction`) every claim is refused,
   * before anything is sent. Calls on existing records go on, so an execution already running
   * still gets its outcome recorded.
   */
  async admit(): Promise<void> {
    await this.#watch.ready()
    const refusal = this.#watch.refusal
    if (refusal !== undefined) {
      throw new StoreUnavailableError(`${refusal.message} The claim was not sent.`, { cause: refusal })
    }
  }

  /**
   * A claim with a plain command wherever no script is needed (docs/design.md §6, "A claim
   * without a script"): `SET key <record> NX GET PX leaseMs + failureRetentionMs - 1`. On a new key
   * it writes the record in layout 3 (its times counted from the key's expiry, which Redis sets
   * on its own clock) and answers ACQUIRED. On a key that holds a record it writes nothing and
   * hands the record back, and what that record proves is decided in src/core/rules.ts
   * (`foundAnswer`, then `runningAnswer` with the bound of Redis's clock kept here): one copy of
   * the claim rule, beside `claimStep` (rules.ts), scripts/claim.lua and the PL/pgSQL claim
   * `<table>_claim_v4` in src/stores/postgres/sql/functions/2-operations.sql (the map is rules.ts's
   * header). Everything those leave goes to claim.lua; so do a layout-1 hash (WRONGTYPE) and a
   * Redis at maxmemory (OOM: the script still replays there).
   */
  claim(request: ClaimRequest): Promise<ClaimResult> {
    const texts = packClaimTexts(request.codec, request.policy, request.operation)
    const record = encodeFreshClaim(request, texts)
    // The key expires 1 ms before the record, as every write sets it (lib/record.lua).
    const lifetime = String(request.leaseMs + request.failureRetentionMs - 1)
    // Read before the SET is sent: Redis runs it later (redis-clock.ts).
    const sentAt = performance.now()
    this.#clock.sampleIfDue(sentAt)
    const set = this.#connection.sendRaw(this.#set, request.key, [record, 'PX', lifetime, 'NX', 'GET'])
    // Behind it on the same connection (the same write when corked), where it is wanted: the
    // expiry Redis gave the key, on its own clock, which gives a new key's lease end exactly
    // and dates a found running record's lease.
    const expiry = this.#expiryWanted(request, sentAt) ? this.#expiryOf(request.key) : undefined
    return set.then(
      (found): ClaimResult | Promise<ClaimResult> => {
        // Read once the reply is here: the SET ran before (redis-clock.ts).
        const repliedAt = performance.now()
        if (found === null) {
          this.#oneCommand?.claimed(request, record, sentAt)
          if (expiry !== undefined) this.#clock.sampleFromExpiry(expiry, Number(lifetime), sentAt, repliedAt)
          const state = request.start ? RecordState.EXECUTING : RecordState.CLAIMED
          const leaseUntil = this.#acquiredLeaseEnd(request, expiry, sentAt)
          if (typeof leaseUntil === 'number')
            return { kind: ClaimReply.ACQUIRED, state, attempt: 1, rev: 1, leaseUntil }
          return leaseUntil.then((end) => ({ kind: ClaimReply.ACQUIRED, state, attempt: 1, rev: 1, leaseUntil: end }))
        }
        const view = Buffer.isBuffer(found) ? foundRecord(found) : undefined
        const answer = view === undefined ? undefined : foundAnswer(view, request)
        if (answer === undefined) {
          if (view?.state !== RecordState.COMPLETED || (found as Buffer)[0] !== RELATIVE_LAYOUT) {
            return this.#claimScript(request, texts)
          }
          return this.#relativeAnswer(request, found as Buffer, view, expiry, repliedAt).then(
            (completed) => completed ?? this.#claimScript(request, texts),
          )
        }
        if (answer !== RUNNING) return answer
        return this.#runningAnswer(request, found as Buffer, view as FoundView, expiry, repliedAt).then(
          (running) => running ?? this.#claimScript(request, texts),
        )
      },
      (error: unknown) => {
        if (error instanceof Error && error.name === 'ReplyError' && /^(WRONGTYPE|OOM)\b/.test(error.message)) {
          return this.#claimScript(request, texts)
        }
        throw redisFault(error)
      },
    )
  }

  /** PEXPIRETIME of `key` (epoch ms; 0 where it failed, -1/-2 with no expiry or no key). */
  #expiryOf(key: string): Promise<number> {
    return this.#connection.sendRaw(this.#pexpiretime, key, []).then(Number, () => 0)
  }

  /**
   * Whether a fast claim sends `PEXPIRETIME` behind its SET (docs/design.md §6, "A claim without
   * a script"): where no clock sample can be kept (a Cluster, or a Redis that refused TIME), for
   * the lease end of a new key; while this store's claims have lately found COMPLETED records in
   * layout 4, to date their replay windows; and for a claim that will not wait while they have
   * lately found running records, to date their leases in the same round trip.
   */
  #expiryWanted(request: ClaimRequest, now: number): boolean {
    if (this.#connection.redis.isCluster || this.#clock.refused) return true
    if (now - this.#relativeSeenAt <= RUNNING_SEEN_MS) return true
    return request.wait !== true && now - this.#runningSeenAt <= RUNNING_SEEN_MS
  }

  /**
   * The lease end an ACQUIRED fast claim reports, on Redis's clock: with the `PEXPIRETIME` sent
   * behind the SET, exactly (the expiry plus 1 ms less the retention); else Redis's time at the
   * SET at least, from the kept sample, plus the lease, so never later than the lease's true end
   * unless Redis's clock stepped back since the sample (redis-clock.ts);
   * with no sample to use, the key's expiry read now.
   */
  #acquiredLeaseEnd(
    request: ClaimRequest,
    expiry: Promise<number> | undefined,
    sentAt: number,
  ): number | Promise<number> {
    if (expiry === undefined) {
      const setAtLeast = this.#clock.atLeast(sentAt)
      if (setAtLeast !== undefined) return Math.floor(setAtLeast) + request.leaseMs
    }
    return (expiry ?? this.#expiryOf(request.key)).then((expireTime) =>
      // Only an operator's replace or a delete between the two commands leaves no expiry:
      // then the lease end is reported as the record's own rule makes it from here. The key
      // expires 1 ms before the record, whose lease ends failureRetentionMs before that.
      expireTime > 0 ? expireTime + 1 - request.failureRetentionMs : Date.now() + request.leaseMs,
    )
  }

  /**
   * IN_PROGRESS without the script, for a record `foundAnswer` called RUNNING: read whole (a
   * layout-3 record with its key's expiry) and judged by `runningAnswer` (src/core/rules.ts) with
   * the lease left that the upper bound of Redis's clock shows (docs/design.md §6, "A claim
   * without a script"); undefined when the script must decide.
   * @param expiry the PEXPIRETIME sent behind the SET, if it was: a layout-3 record's times count
   *   from it.
   */
  async #runningAnswer(
    request: ClaimRequest,
    found: Buffer,
    view: FoundView,
    expiry: Promise<number> | undefined,
    repliedAt: number,
  ): Promise<ClaimResult | undefined> {
    // The next claims send the expiry behind their SET, while duplicates keep coming.
    this.#runningSeenAt = repliedAt
    const redisAtMost = this.#clock.atMost(repliedAt)
    if (redisAtMost === undefined) return undefined
    const record = view.record ?? (await this.#withExpiry(request.key, found, expiry))
    if (record === undefined) return undefined
    const left = certainLeaseLeftMs(record.leaseUntil, redisAtMost)
    return runningAnswer(record, left, record.owner === request.owner, request)
  }

  /**
   * A replay or a refused body without the script, for a COMPLETED record in layout 4
   * (src/stores/record-layout.ts): its times, the replay window's end included, count from the
   * key's expiry, read behind the SET or, where this claim did not send it, now; then decided as
   * a layout-2 record is (`foundAnswer`). Undefined when the script must decide: the key gone
   * meanwhile, or bytes that do not read as a record.
   * @param expiry the PEXPIRETIME sent behind the SET, if it was.
   */
  async #relativeAnswer(
    request: ClaimRequest,
    found: Buffer,
    view: FoundView,
    expiry: Promise<number> | undefined,
    repliedAt: number,
  ): Promise<ClaimResult | undefined> {
    // The next claims send the expiry behind their SET, while such records keep coming.
    this.#relativeSeenAt = repliedAt
    const record = await this.#withExpiry(request.key, found, expiry)
    if (record === undefined) return undefined
    const answer = foundAnswer({ ...view, record }, request)
    return answer === RUNNING ? undefined : answer
  }

  /**
   * A layout-3 or 4 record read whole: its times count from the key's expiry, read behind the
   * SET or, where this claim did not send it, now (docs/design.md §6). Undefined when the key
   * has no expiry (gone meanwhile), or the bytes do not read as a record (a layout-2 record
   * `foundRecord` could not decode among them).
   */
  async #withExpiry(
    key: string,
    found: Buffer,
    expiry: Promise<number> | undefined,
  ): Promise<StoredRecord | undefined> {
    if (found[0] === RECORD_LAYOUT) return undefined
    const expireTime = await (expiry ?? this.#expiryOf(key))
    if (!(expireTime > 0)) return undefined
    try {
      return decodeRecord(found, expireTime)
    } catch {
      return undefined
    }
  }

  /** claim.lua, the claim that decides by the store's clock and changes the record. */
  #claimScript(request: ClaimRequest, texts: Buffer): Promise<ClaimResult> {
    const args: (string | Buffer)[] = [
      request.owner,
      request.fingerprint,
      request.start ? '1' : '0',
      request.expiredExecution,
      String(request.leaseMs),
      String(request.failureRetentionMs),
      texts,
      request.wait === true ? '1' : '0',
    ]
    const legacy = request.legacyFingerprints
    if (legacy !== undefined) for (const fingerprint of legacy) args.push(fingerprint)
    return this.#connection.send(this.#claim, request.key, args).then(decodeClaimReply)
  }
}

/**
 * The fast claims' sample of Redis's clock (redis-clock.ts): taken with a TIME sent in the same
 * write as a claim's SET, kept with the connection it came on.
 */
class ClockSampler {
  readonly #connection: Connection
  /** TIME, which samples Redis's clock for the fast claims. */
  readonly #time: ScriptCommand
  /**
   * The bounds of Redis's clock the fast claims keep (redis-clock.ts): one per store, since one
   * standalone or Sentinel master keeps its keys; none on a Cluster, whose nodes each have a
   * clock of their own.
   */
  #sample: ClockSample | undefined
  /**
   * The connection the kept sample came on: after a reconnect (perhaps to another master, after
   * a failover, with a clock of its own) the sample is not used, and a claim on the new
   * connection takes another.
   */
  #sampleSocket: unknown
  /**
   * When the TIME in flight that samples the clock was sent (local monotonic ms), if one is: one
   * at a time, and another once it has gone unanswered for `SAMPLE_REFRESH_MS` (a client that
   * dropped it without rejecting).
   */
  #samplingSince: number | undefined
  /** Whether Redis (or a proxy before it) refused TIME: then no sample is kept. */
  #refused = false

  constructor(connection: Connection) {
    const redis = connection.redis
    this.#connection = connection
    this.#time = () => redis.time()
  }

  /** Whether Redis (or a proxy before it) refused TIME: then the claims read the key's expiry instead. */
  get refused(): boolean {
    return this.#refused
  }

  /** Redis's time at least at any instant after local `sentAt`, from a sample taken on the connection of now; else undefined. */
  atLeast(sentAt: number): number | undefined {
    if (this.#connection.socket() !== this.#sampleSocket) return undefined
    return redisTimeAtLeast(this.#sample, sentAt)
  }

  /** Redis's time at most at any instant before local `repliedAt`, from a sample taken on the connection of now; else undefined. */
  atMost(repliedAt: number): number | undefined {
    if (this.#connection.socket() !== this.#sampleSocket) return undefined
    return redisTimeAtMost(this.#sample, repliedAt)
  }

  /**
   * A new key's `PEXPIRETIME` sent behind its SET is one more sample of Redis's clock: PX set the
   * expiry at Redis's time of the SET (whole ms) plus `lifetime`, and the SET ran after local
   * `sentAt` and before `repliedAt`. It replaces the kept sample as a TIME's would (nextSample),
   * so a step of Redis's clock shows at the next such claim instead of at the next TIME.
   */
  sampleFromExpiry(expiry: Promise<number>, lifetime: number, sentAt: number, repliedAt: number): void {
    if (this.#connection.redis.isCluster) return
    const socket = this.#connection.socket()
    void expiry.then((expireTime) => {
      if (!(expireTime > 0) || socket !== this.#sampleSocket || this.#connection.socket() !== socket) return
      // Redis's ms is the floor of its time: the SET ran within [setAt, setAt + 1).
      this.#sample = nextSample(this.#sample, sentAt - 1, expireTime - lifetime, repliedAt)
    })
  }

  /**
   * Sends `TIME` ahead of a claim's SET, in the same write, when the clock sample is due (none,
   * one older than `SAMPLE_REFRESH_MS`, or one from another connection) and none is in flight:
   * about once a second under load. Redis read its clock after local `sentAt` and before the
   * reply was read (redis-clock.ts).
   */
  sampleIfDue(sentAt: number): void {
    if (this.#refused || this.#connection.redis.isCluster) return
    if (this.#samplingSince !== undefined && sentAt - this.#samplingSince < SAMPLE_REFRESH_MS) return
    const socket = this.#connection.socket()
    if (socket === this.#sampleSocket && !sampleDue(this.#sample, sentAt)) return
    this.#samplingSince = sentAt
    this.#connection.sendRaw(this.#time, '', []).then(
      (reply) => {
        const repliedAt = performance.now()
        if (this.#samplingSince === sentAt) this.#samplingSince = undefined
        // A reconnect meanwhile: either master may have answered.
        if (this.#connection.socket() !== socket) return
        const [seconds, micros] = reply as [string, string]
        if (socket !== this.#sampleSocket) this.#sample = undefined
        this.#sampleSocket = socket
        this.#sample = nextSample(this.#sample, sentAt, Number(seconds) * 1000 + Number(micros) / 1000, repliedAt)
      },
      (error: unknown) => {
        if (this.#samplingSince === sentAt) this.#samplingSince = undefined
        if (error instanceof Error && TIME_REFUSED.test(error.message)) this.#refused = true
      },
    )
  }
}

/** A record `SET ... NX GET` handed back, as `foundAnswer` reads it, the whole record where its bytes give it. */
export interface FoundView extends FoundRecord {
  readonly record: StoredRecord | undefined
}

/**
 * What the claim without a script reads of the bytes `SET ... NX GET` handed back: state and
 * fingerprint, and a layout-2 record whole (its times are in it; a layout-3 or 4 record's count
 * from its key's expiry, read only where `runningAnswer` or a COMPLETED record needs them).
 * Undefined when the bytes are not a record's: the script answers then.
 */
export function foundRecord(found: Buffer): FoundView | undefined {
  const fp = recordFingerprint(found)
  const state = recordState(found)
  if (fp === undefined || state === undefined) return undefined
  let record: StoredRecord | undefined
  if (found[0] === RECORD_LAYOUT) {
    try {
      record = decodeRecord(found)
    } catch {
      record = undefined
    }
  }
  return { state, fp, record }
}
