/**
 * The nemesis app's routes and the rules each is configured with (test/nemesis/app.ts); the
 * clients (traffic.ts) and the checker (checker.ts) read the same table, so the checker holds
 * each route to its own rules.
 *
 * - `/orders`: `expiredExecution: 'recover'`, the run's lease (3 s): the handler runs at most
 *   once per key; an execution whose lease ran out is recovery-required, never re-run.
 * - `/takeovers`: `expiredExecution: 'takeover'`, a lease of 1 s: one key in three stalls its
 *   first execution's event loop past the lease, and the client sends a hedged duplicate to
 *   another instance meanwhile, which takes the key over and runs it again with the next
 *   fencing token; the stale owner wakes and its completion must be refused.
 * - `/waits`: `inFlight: { waitMs: 2 s }`: a duplicate of a running request waits for its
 *   outcome instead of answering 409 at once.
 * - `/resumes`: `resume: true`, a lease of 1 s: the handler charges the run's payment service
 *   (examples/payments-app.ts, a separate idemkit service) through `idemkit/client` with
 *   `keyFor('charge')` and answers the charge's id; a run killed or stalled past its lease is
 *   resumed by a retry with the next fencing token and the same downstream key, so the payment
 *   service charges once per key and every answer names that charge. One key in three stalls
 *   its first execution after the charge, as on `/takeovers`.
 * - `/deposits` (PostgreSQL): `transaction: true`, the run's lease.
 */
export type Route = '/orders' | '/takeovers' | '/waits' | '/resumes' | '/deposits'

export interface RouteRules {
  /** What a claim does with an execution whose lease ran out. */
  readonly expiredExecution: 'recover' | 'takeover' | 'resume'
  /** The route's own lease (the run's when absent). */
  readonly leaseMs?: number
  /** `inFlight: { waitMs }` (absent: 409 at once). */
  readonly waitMs?: number
}

export const TAKEOVER_LEASE_MS = 1_000
export const RESUME_LEASE_MS = 1_000
export const WAIT_MS = 2_000

export const ROUTE_RULES: Readonly<Record<Route, RouteRules>> = {
  '/orders': { expiredExecution: 'recover' },
  '/takeovers': { expiredExecution: 'takeover', leaseMs: TAKEOVER_LEASE_MS },
  '/waits': { expiredExecution: 'recover', waitMs: WAIT_MS },
  '/resumes': { expiredExecution: 'resume', leaseMs: RESUME_LEASE_MS },
  '/deposits': { expiredExecution: 'recover' },
}

/** The routes whose handler is the order handler. */
export const ORDER_ROUTES = ['/orders', '/takeovers', '/waits'] as const

/** The routes the clients send order bodies to: the order routes and the charging one. */
export const SENT_ROUTES = [...ORDER_ROUTES, '/resumes'] as const

/** The idempotency options of a route, as the app passes them (`resume: true` for `'resume'`). */
export function routeOptions(route: (typeof SENT_ROUTES)[number]) {
  const rules = ROUTE_RULES[route]
  return {
    ...(rules.expiredExecution === 'resume' ? { resume: true } : { expiredExecution: rules.expiredExecution }),
    ...(rules.leaseMs === undefined ? {} : { leaseMs: rules.leaseMs }),
    ...(rules.waitMs === undefined ? {} : { inFlight: { waitMs: rules.waitMs } }),
  }
}
