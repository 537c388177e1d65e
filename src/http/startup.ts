/**
 * The startup report: once the app is ready, one log line says what the store runs on (its
 * `describe()`), then one warning per setting that can lose records; the report also goes to
 * the `idemkit:event` channel as a `store-ready` event. It never delays the start: a store that
 * cannot be reached yet is logged as such, and requests answer 503 until it can.
 */
import { publishStoreEvent } from '../core/channels.js'
import type { IdempotencyStore } from '../core/store.js'
import type { GuardLogger } from './guard.js'

export function reportStore(store: IdempotencyStore, log: GuardLogger | undefined): Promise<void> {
  if (typeof store.describe !== 'function') {
    log?.info({ idempotency: { store: store.name } }, 'idempotency store ready')
    return Promise.resolve()
  }
  return store.describe().then(
    (report) => {
      publishStoreEvent(store.name, { type: 'store-ready', report })
      log?.info({ idempotency: report }, 'idempotency store ready')
      for (const warning of report.warnings) {
        log?.warn({ idempotency: { store: report.store } }, `idempotency store: ${warning}`)
      }
    },
    (error: unknown) => {
      log?.warn(
        { idempotency: { store: store.name }, err: error },
        'idempotency store not reachable at startup; requests answer 503 until it is',
      )
    },
  )
}
