/**
 * The store contract (docs/design.md §3). Every implementation (Redis, PostgreSQL, memory) passes
 * the same contract suite, `idemkit/testing` (src/testing/store-contract.ts).
 *
 * Rules every method follows:
 * - Every decision about leases and expiry is made with the store's own clock (Redis `TIME`
 *   inside the script, the memory store's single clock), never the caller's.
 * - Every call touches exactly one record, named by `key` (built by `storeKey()`).
 * - Outcomes are values. Exceptions are faults: `StoreUnavailableError` when the call was
 *   certainly not applied (nothing was sent), `StoreIndeterminateError` when it may have been
 *   applied (sent, then the reply was lost), `StoreProtocolError` for a reply of the wrong shape.
 * - Record lifetime: every record carries `expiresAt` (server epoch ms), the time from which
 *   claim and inspect treat it as absent; a store whose keys expire by themselves (Redis
 *   `SET ... PXAT`) sets the key's expiry 1 ms before it, so the key exists exactly while the
 *   record is live (Redis drops a key once its expiry is past). CLAIMED and EXECUTING:
 *   `leaseUntil + failureRetentionMs`, moved on every claim, start and renew (so the record
 *   always outlives its lease); COMPLETED: `replayUntil = completion + replayWindowMs`;
 *   FAILED_RETRYABLE and ABANDONED: `mark + failureRetentionMs`.
 */

import type { FailureCause } from './failure-cause.js'
import type {
  ClaimReply,
  ExpiredExecution,
  FailureKind,
  InspectReply,
  RecordState,
  StoreRecoveryReason,
  TransitionReply,
} from './record.js'

/** Durations that govern one record, in integer milliseconds (all > 0). */
export interface RecordTimes {
  /** How long an owner holds the scope before another claim may act on it. */
  readonly leaseMs: number
  /** How long a COMPLETED record replays its response. */
  readonly replayWindowMs: number
  /** How long a failed or unfinished record is kept after its lease or mark. */
  readonly failureRetentionMs: number
}

/** The identity of one invocation's hold on a record. */
export interface OwnerRef {
  /** The record's store key. */
  readonly key: string
  /** The invocation's owner token: 64 lowercase hex characters, unique per invocation. */
  readonly owner: string
  /** The record's attempt number the owner holds (the fencing token). */
  readonly attempt: number
  /**
   * The record revision the sender last saw. Transitions are compare-and-set on it; a re-sent
   * transition whose effect is there already (state is the target, rev is exactly `rev + 1`)
   * answers ALREADY.
   */
  readonly rev: number
}

export interface ClaimRequest extends RecordTimes {
  readonly key: string
  /** The invocation's owner token (64 lowercase hex), the same for every re-send. */
  readonly owner: string
  /** The request fingerprint stored with a new record and compared on every later claim. */
  readonly fingerprint: string
  /**
   * Fingerprints of the same request under older fingerprint algorithm versions: a stored
   * fingerprint equal to any of these also counts as a match (docs/design.md §5, versioned fingerprint).
   */
  readonly legacyFingerprints?: readonly string[]
  /** Operation name, stored in the record as `op`. */
  readonly operation: string
  /** Codec id stored with the record (checked on replay by the executor). */
  readonly codec: string
  /** Policy revision stored with the record (checked on replay by the executor). */
  readonly policy: string
  /** When true the record is created (or taken over) directly in EXECUTING, in one call. */
  readonly start: boolean
  /**
   * docs/design.md §3 steps 4 and 7: what to do with an EXECUTING record whose lease has run
   * out (`recover`, `takeover`), and with an ABANDONED one too (`resume` takes over both).
   */
  readonly expiredExecution: ExpiredExecution
  /**
   * True when the caller will wait for an execution in progress and `watch()` the key
   * (`inFlight: { waitMs }`). A store may notify its watchers only for records a waiting claim
   * marked: it then marks the record when the claim answers IN_PROGRESS, in the same atomic
   * step (docs/waiting.md). Changes nothing else the claim does. Optional: absent is false.
   */
  readonly wait?: boolean
}

/** A record view returned when the caller now holds the record. */
export interface HeldRecord {
  readonly state: typeof RecordState.CLAIMED | typeof RecordState.EXECUTING
  readonly attempt: number
  readonly rev: number
  /**
   * Server time (epoch ms) when the lease ends. A store may report a bound on a new key's
   * claim (the Redis store's, from its sample of Redis's clock: at most a round trip early, or,
   * until its next sample after Redis's clock stepped back, up to the step late; docs/design.md
   * §6); nothing in the executor reads it.
   */
  readonly leaseUntil: number
}

/** A completed record's stored answer. */
export interface StoredCompletion {
  /** The codec-encoded response, byte for byte as it was stored. */
  readonly response: Buffer
  readonly codec: string
  readonly policy: string
  /** Server time (epoch ms) until which the record replays. */
  readonly replayUntil: number
}

export type ClaimResult =
  | ({ readonly kind: typeof ClaimReply.ACQUIRED } & HeldRecord)
  | ({ readonly kind: typeof ClaimReply.TAKEN_OVER } & HeldRecord)
  | ({ readonly kind: typeof ClaimReply.REPLAYED_ACQUIRE } & HeldRecord)
  | ({ readonly kind: typeof ClaimReply.COMPLETED_REPLAY } & StoredCompletion)
  | { readonly kind: typeof ClaimReply.FINGERPRINT_MISMATCH }
  | { readonly kind: typeof ClaimReply.RECOVERY_REQUIRED; readonly reason: StoreRecoveryReason }
  | {
      readonly kind: typeof ClaimReply.IN_PROGRESS
      /** Milliseconds left on the holder's lease, at least 1. */
      readonly retryAfterMs: number
    }

export type TransitionResult =
  | { readonly kind: typeof TransitionReply.OK; readonly rev: number }
  | { readonly kind: typeof TransitionReply.ALREADY; readonly rev: number }
  | { readonly kind: typeof TransitionReply.NOT_FOUND }
  | { readonly kind: typeof TransitionReply.NOT_OWNER }
  | { readonly kind: typeof TransitionReply.WRONG_STATE; readonly state: RecordState }

export type RenewResult =
  | { readonly kind: typeof TransitionReply.OK; readonly leaseUntil: number }
  | { readonly kind: typeof TransitionReply.NOT_FOUND }
  | { readonly kind: typeof TransitionReply.NOT_OWNER }
  | { readonly kind: typeof TransitionReply.WRONG_STATE; readonly state: RecordState }

/** Fields every present record shows to an inspection. */
export interface InspectedRecord {
  /** True when the record's owner is the inspecting token. */
  readonly mine: boolean
  readonly attempt: number
  readonly rev: number
  readonly fingerprint: string
  readonly operation: string
}

export type InspectResult =
  | { readonly kind: typeof InspectReply.ABSENT }
  | ({
      readonly kind: typeof InspectReply.CLAIMED | typeof InspectReply.EXECUTING
      readonly leaseUntil: number
      /** Milliseconds left on the lease by the store's clock; 0 when it has run out. */
      readonly leaseRemainingMs: number
    } & InspectedRecord)
  | ({ readonly kind: typeof InspectReply.COMPLETED } & InspectedRecord & StoredCompletion)
  | ({ readonly kind: typeof InspectReply.FAILED_RETRYABLE } & InspectedRecord)
  | ({ readonly kind: typeof InspectReply.ABANDONED } & InspectedRecord)

/**
 * The idempotency store. Implement this interface and pass the contract suite to add a store.
 */
export interface IdempotencyStore {
  /** A short name for logs and errors, e.g. `redis` or `memory`. */
  readonly name: string

  /**
   * The first segment of every key this store holds (`<keyPrefix>:idem:...`), set when the
   * store is created. The executor builds keys with it (see `storeKey()`).
   */
  readonly keyPrefix: string

  /**
   * Claims a scope: docs/design.md §3 claim steps 1-8, in that order, in one atomic step.
   * 1. absent or expired → a new record (CLAIMED, or EXECUTING when `start`), attempt 1, rev 1:
   *    ACQUIRED.
   * 2. stored fingerprint differs (from `fingerprint` and every legacy one) →
   *    FINGERPRINT_MISMATCH, with no mutation, whatever the state.
   * 3. COMPLETED → COMPLETED_REPLAY with the stored response, codec and policy.
   * 4. ABANDONED → RECOVERY_REQUIRED (reason ABANDONED), or TAKEN_OVER as in 6 when
   *    `expiredExecution` is `resume`.
   * 5. owner equals `owner` and the record is CLAIMED or EXECUTING → REPLAYED_ACQUIRE with
   *    the current state, no mutation (the caller's own earlier claim landed; its reply was
   *    lost). The caller's own FAILED_RETRYABLE record goes on to step 6 like anyone else's.
   * 6. FAILED_RETRYABLE, or CLAIMED with the lease run out → TAKEN_OVER: owner replaced,
   *    attempt + 1, rev + 1, fingerprint/codec/policy/op rewritten, state CLAIMED or EXECUTING.
   * 7. EXECUTING with the lease run out → RECOVERY_REQUIRED (reason EXPIRED_EXECUTION), or
   *    TAKEN_OVER as in 6 when `expiredExecution` is `takeover` or `resume`.
   * 8. otherwise → IN_PROGRESS with the time left on the lease.
   * @param request the claim; `owner` stays the same for every re-send of one invocation's claim.
   * @returns the claim's outcome.
   * @throws StoreUnavailableError when nothing was sent; StoreIndeterminateError when the claim
   *   may have been applied.
   */
  claim(request: ClaimRequest): Promise<ClaimResult>

  /**
   * CLAIMED → EXECUTING for `ref`. Like every transition and renew, it treats a record past
   * its `expiresAt` as absent (NOT_FOUND), as claim and inspect do. Sets a new lease (`leaseMs` from now) and the unfinished TTL.
   * @returns OK with the new rev; ALREADY when it is EXECUTING at `ref.rev + 1` for this owner;
   *   NOT_FOUND, NOT_OWNER (owner or attempt differ) or WRONG_STATE otherwise.
   */
  start(ref: OwnerRef, times: RecordTimes): Promise<TransitionResult>

  /**
   * EXECUTING → COMPLETED for `ref`, storing `response`; the record then lives (and replays)
   * for `times.replayWindowMs`.
   * @returns OK / ALREADY (COMPLETED at `ref.rev + 1` for this owner) / refusal.
   */
  complete(ref: OwnerRef, response: Uint8Array, times: RecordTimes): Promise<TransitionResult>

  /**
   * EXECUTING → FAILED_RETRYABLE (`retryable`) or ABANDONED (`unknown`) for `ref`; the record
   * then lives for `times.failureRetentionMs`.
   * @param cause why it failed, kept with the failed record for `read()` (bounded by the store
   *   front, `boundCause`); optional, and a store without `read()` may drop it.
   * @returns OK / ALREADY (the target state at `ref.rev + 1` for this owner) / refusal.
   */
  markFailed(ref: OwnerRef, kind: FailureKind, times: RecordTimes, cause?: FailureCause): Promise<TransitionResult>

  /**
   * Deletes a CLAIMED record held by `ref` (compare-and-set on owner, attempt, rev, state).
   * Never deletes any other state: an EXECUTING record is the evidence against a second run.
   * @returns OK with `rev` 0 when deleted; NOT_FOUND, NOT_OWNER or WRONG_STATE otherwise.
   */
  release(ref: OwnerRef): Promise<TransitionResult>

  /**
   * Moves the lease of an EXECUTING record held by `ref` (owner and attempt; rev is not
   * compared and not changed) to `leaseMs` from now, and the TTL with it. Always writes; never
   * answers ALREADY.
   * @returns OK with the new `leaseUntil`, or NOT_FOUND / NOT_OWNER / WRONG_STATE.
   */
  renew(ref: OwnerRef, times: RecordTimes): Promise<RenewResult>

  /**
   * Read-only classification with the same rules and clock as claim: a record past its replay
   * window or retention is ABSENT, exactly as claim would then acquire.
   * @param key the record's key.
   * @param owner the inspecting invocation's token; decides `mine`.
   */
  inspect(key: string, owner: string): Promise<InspectResult>

  /** Releases resources the store created (never a client it was given). */
  close(): Promise<void>

  /**
   * Calls `listener` when the record under `key` may have left CLAIMED/EXECUTING (completed,
   * failed, released, replaced), from any process: the notification that lets a request wait
   * for an execution in progress (`inFlight: { waitMs }`) instead of polling. Best effort: a
   * notification may be late, spurious or lost (the waiters also poll). Optional.
   * @param ready called once the notifications are flowing (the subscription is active), or as
   *   soon as the store knows they never will: the waiters' first inspect follows it, so a change
   *   between a claim and the subscription is not missed. Optional to call: without it the
   *   waiters' poll timer decides.
   * @returns a function that stops the listener.
   */
  watch?(key: string, listener: () => void, ready?: () => void): () => void

  /**
   * What the store runs on, for the startup report: its server's version and mode, the
   * settings that decide what survives a crash, and warnings for those that can lose records.
   * Optional: a store without it is reported by its name alone.
   */
  describe?(): Promise<StoreReport>

  /**
   * Where the store's server is, for telemetry (the OpenTelemetry database conventions'
   * `server.address`, `server.port`, `db.namespace`, `db.collection.name`). Called per traced
   * store call, so it follows a failover. Optional.
   */
  endpoint?(): StoreEndpoint | undefined

  /**
   * The record under `key` as stored, whether live or not, with the store's clock: for
   * operators (`idemkit inspect`), never for a decision. Optional.
   */
  read?(key: string): Promise<ReadResult>

  /**
   * Operators only (`idemkit resolve`): replaces the record under `key` by `next`, or deletes
   * it when `next` is undefined, if it is still the `expected` one (as `read()` gave it: same
   * state, owner, attempt, rev and times). Optional.
   * @returns true when replaced; false when the record changed since or is gone.
   */
  replace?(key: string, expected: RecordView, next: RecordView | undefined): Promise<boolean>

  /**
   * Operators only (`idemkit list`, `stats`): every record this store's key prefix holds, as
   * stored, in batches, with the store's clock. Optional.
   */
  scan?(): AsyncIterable<ScannedRecord>
}

/** Where a store's server is (`endpoint()`): what a database client span names. */
export interface StoreEndpoint {
  /** The server's host name or address. */
  readonly address?: string
  readonly port?: number
  /** The database: PostgreSQL's database name, Redis's database number as a string. */
  readonly namespace?: string
  /** The table (PostgreSQL: `schema.table`). */
  readonly collection?: string
}

/** One record of `scan()`: its key, the record, and the store's clock when its batch was read. */
export interface ScannedRecord {
  readonly key: string
  readonly record: RecordView
  readonly now: number
}

/** A record as stored (times in epoch milliseconds; `replayUntil` 0 unless COMPLETED). */
export interface RecordView {
  readonly state: RecordState
  readonly owner: string
  readonly attempt: number
  readonly rev: number
  readonly leaseUntil: number
  readonly replayUntil: number
  readonly expiresAt: number
  readonly createdAt: number
  readonly updatedAt: number
  readonly fp: string
  readonly codec: string
  readonly policy: string
  readonly op: string
  /** The stored response's bytes (empty unless COMPLETED). */
  readonly response: Buffer
  /**
   * FAILED_RETRYABLE and ABANDONED: why the execution failed, as `markFailed` kept it; absent on
   * a record failed without one (or written before causes were kept).
   */
  readonly cause?: FailureCause
}

/** What `read()` answers: the record, if any, and the store's clock when it was read. */
export interface ReadResult {
  readonly record: RecordView | undefined
  readonly now: number
}

/** The store's startup report (`describe()`); the plugin logs it once the app is ready. */
export interface StoreReport {
  /** The store's name: `redis`, `postgres`, `memory`. */
  readonly store: string
  /** The server's version, when there is a server. */
  readonly version?: string
  /** How it is deployed, e.g. Redis `standalone`, `sentinel` or `cluster`. */
  readonly mode?: string
  /** The settings that decide what survives a crash or a failover, as the server reports them. */
  readonly settings: Readonly<Record<string, string | number | boolean>>
  /** Settings that can lose records or answers, in words; empty when there are none. */
  readonly warnings: readonly string[]
}
