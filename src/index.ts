/**
 * The framework-free core (`idemkit/core`): the executor, the stores, scope digest and
 * fingerprint helpers, errors and public types.
 */

export { newOwnerToken } from './core/attempt.js'
export type { InvocationStart, StoreCallContext } from './core/channels.js'
export { EVENT_CHANNEL, OUTCOME_CHANNEL, START_CHANNEL, STORE_CHANNEL } from './core/channels.js'
export type { Codec } from './core/codec.js'
export { jsonCodec } from './core/codec.js'
export type { DerivedKeyFormat, KeyFor, KeyForOptions } from './core/derived-key.js'
export { derivedKey } from './core/derived-key.js'
export {
  ErrorCode,
  IdempotencyError,
  IdempotencyInProgressError,
  IdempotencyKeyReusedError,
  IdempotencyRecoveryRequiredError,
  StoreIndeterminateError,
  StoreProtocolError,
  StoreUnavailableError,
} from './core/errors.js'
export type {
  ActionContext,
  BeginInput,
  BeginRequest,
  Decided,
  ExecuteRequest,
  ExecutionScope,
  ExecutorConfig,
  Finished,
  KeyedBeginInput,
  Run,
  ScopedBeginInput,
} from './core/executor.js'
export { begin, defaultClassify, Executor, execute } from './core/executor.js'
export type { FailureCause } from './core/failure-cause.js'
export type { FingerprintBody, FingerprintInput } from './core/fingerprint.js'
export { FINGERPRINT_VERSION, fingerprint } from './core/fingerprint.js'
export { LeaseLostError } from './core/lease.js'
export type { ExecuteOutcome, ExecutorEvent, IdempotencyEvent, OutcomeEvent, Settled } from './core/outcomes.js'
export { Classification, UnrecordedReason } from './core/outcomes.js'
export type { Policy } from './core/policy.js'
export { DEFAULT_POLICY, resolvePolicy } from './core/policy.js'
export type { StoreRecoveryReason } from './core/record.js'
export {
  ClaimReply,
  ExpiredExecution,
  FailureKind,
  InspectReply,
  RecordState,
  RecoveryReason,
  TransitionReply,
} from './core/record.js'
export type { ReplayCacheOptions } from './core/replay-cache.js'
export { ReplayCache } from './core/replay-cache.js'
export type { Step } from './core/run/steps.js'
export type { ScopeInput, Secrets, SecretsInput } from './core/scope.js'
export { parseSecrets, scopeDigest } from './core/scope.js'
export type {
  ClaimRequest,
  ClaimResult,
  IdempotencyStore,
  InspectResult,
  OwnerRef,
  RecordTimes,
  RenewResult,
  StoreEndpoint,
  TransitionResult,
} from './core/store.js'
export { operationCode, storeKey } from './core/store-key.js'
export type {
  AppTransactions,
  StepPoint,
  SteppedTransaction,
  StoreTransaction,
  TransactionalStore,
  TransactionClient,
  TransactionPort,
} from './core/store-transaction.js'
export { isTransactional, keepsSteps } from './core/store-transaction.js'
export type {
  BatchHandler,
  BatchItemFailure,
  BatchItemResult,
  BatchResult,
  IdempotentBatchOptions,
} from './jobs/batch.js'
export { idempotentBatch } from './jobs/batch.js'
export type { CallerArgs, CallResult, IdempotentFunction } from './jobs/idempotent.js'
export { idempotent, makeIdempotent } from './jobs/idempotent.js'
export type { IdempotentOptions } from './jobs/options.js'
export { SHARED_PRINCIPAL } from './jobs/options.js'
export type { MemoryStoreOptions } from './stores/memory/index.js'
export { memoryStore } from './stores/memory/index.js'
export type { PostgresPool, PostgresStoreEvent, PostgresStoreOptions } from './stores/postgres/index.js'
export { postgresFault, postgresStore } from './stores/postgres/index.js'
export type { RedisServerReport, RedisStoreEvent, RedisStoreOptions } from './stores/redis/index.js'
export { redisFault, redisStore } from './stores/redis/index.js'
