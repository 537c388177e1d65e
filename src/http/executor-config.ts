/**
 * One route's executor settings, built from the resolved options and route: the response
 * codec and classifier, the timing and in-flight settings, and the events that are logged
 * (lease trouble) and handed to `onEvent`.
 */
import type { ExecutorConfig } from '../core/executor.js'
import type { ExecutorEvent } from '../core/outcomes.js'
import { shortDigest } from '../core/store-key.js'
import { answerStatus } from './answer-status.js'
import { settledClassifier } from './classify.js'
import type { GuardLogger } from './guard.js'
import type { ResolvedOptions } from './options.js'
import { type CapturedResponse, responseCodec } from './response-codec.js'
import type { ResolvedRoute } from './route-options.js'

/** The executor events the guard logs (lease trouble); without `onEvent`, the rest are not built. */
const LOGGED_EVENTS: ReadonlySet<ExecutorEvent['type']> = new Set(['renew-refused', 'renew-failed'])

/**
 * The executor settings of one route.
 * @param operation the route's operation (its own name, or `defaultOperation`).
 * @param defaultOperation `METHOD /route/pattern`: the `method` and `route` labels of its events.
 */
export function executorConfig<Request>(
  options: ResolvedOptions<Request>,
  route: ResolvedRoute<Request>,
  operation: string,
  defaultOperation: string,
): ExecutorConfig<CapturedResponse, GuardLogger> {
  const space = defaultOperation.indexOf(' ')
  const labels = { method: defaultOperation.slice(0, space), route: defaultOperation.slice(space + 1) }
  const listener = options.onEvent
  return {
    store: options.store,
    operation,
    codec: responseCodec(route.storedHeaders, route.maxResponseBytes),
    policy: route.policy,
    classify: settledClassifier(route.classify),
    onEvent:
      listener === undefined
        ? logEvent
        : (event, log, key) => {
            logEvent(event, log, key)
            try {
              listener({ ...event, operation, digest: shortDigest(key), ...labels })
            } catch {
              // An observer never changes the answer.
            }
          },
    events: listener === undefined ? LOGGED_EVENTS : undefined,
    labels,
    statusOf: answerStatus,
    recordRetryMs: options.recordRetryMs,
    claimTimeoutMs: options.claimTimeoutMs,
    storeCallTimeoutMs: options.storeCallTimeoutMs,
    unavailableRetryAfterMs: options.unavailableRetryAfterMs,
    transaction: route.transaction,
    secrets: options.secrets,
    inFlightWaitMs: route.inFlightWaitMs,
    inFlightMaxWaiters: route.inFlightMaxWaiters,
    inProgressRetryAfterMs: route.inProgressRetryAfterMs,
    replayCache: options.replayCache,
  }
}

function logEvent(event: ExecutorEvent, log: GuardLogger, key: string): void {
  const digest = shortDigest(key)
  if (event.type === 'renew-refused') {
    log.warn(
      { idempotency: { digest, attempt: event.attempt, renew: event.result } },
      'idempotency lease lost to a takeover',
    )
  } else if (event.type === 'renew-failed') {
    log.warn({ idempotency: { digest }, err: event.error }, 'idempotency lease renewal failed')
  }
}
