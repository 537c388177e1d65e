/**
 * The nemesis run's clients (run.ts): each sends new keys to the three app instances until the
 * quiet phase and retries each as a real client does (a duplicate at once to another instance
 * now and then, the same key with another body once in a while); then every key is probed once
 * more. Every request and its answer, or its timeout or error, is an operation of the history.
 *
 * The keys go to every route of routes.ts: on `/takeovers` one in three stalls its first
 * execution past the route's lease and the client hedges (the same request again, to another
 * instance, once the first has run longer than the lease), so the hedge takes the key over
 * while the stale owner still runs; on `/waits` most keys get a duplicate at once, which waits
 * for the first; `/resumes` keys stall and are hedged as on `/takeovers` (the hedge resumes the
 * run, which charges the payment service again under the same derived key), and a 2xx answer's
 * charge id is kept with the operation. Every sixth key string is shared by every client (each its own principal),
 * with the same body: each principal must get its own answer.
 */
import { createHash } from 'node:crypto'
import type { Operation, Route } from './history.js'
import { RESUME_LEASE_MS, SENT_ROUTES, TAKEOVER_LEASE_MS } from './routes.js'
import { mulberry32 } from './schedule.js'

const CLIENT_TIMEOUT_MS = 15_000

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)))
const hash = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 16)

/** A key a client sent: who, where and with which body (the probe sends it once more). */
export interface SentKey {
  readonly client: number
  readonly user: string
  readonly key: string
  readonly route: Route
  readonly body: Record<string, unknown>
}

export class Traffic {
  /** Every request sent, in the order their answers came. */
  readonly operations: Operation[] = []
  /** Every key sent, in the order it was first sent. */
  readonly keys: SentKey[] = []
  #nextOp = 0

  /**
   * @param url The base URL of an instance now (an instance restarted gets another).
   * @param now Milliseconds since the load began.
   */
  constructor(
    private readonly url: (instance: number) => string | undefined,
    private readonly now: () => number,
  ) {}

  /** Sends one request and records it. */
  async send(
    client: number,
    user: string,
    key: string,
    route: Route,
    body: Record<string, unknown>,
    instance: number,
    flags: { changed?: boolean; probe?: boolean; hedge?: boolean } = {},
  ): Promise<Operation> {
    const op = this.#nextOp++
    const text = JSON.stringify(body)
    const start = this.now()
    const base = {
      op,
      client,
      user,
      key,
      route,
      instance,
      bodyHash: hash(text),
      changed: flags.changed ?? false,
      probe: flags.probe ?? false,
      ...(flags.hedge ? { hedge: true } : {}),
      start,
      ...(route === '/deposits' ? { account: body.account as string, amount: body.amount as number } : {}),
    }
    let operation: Operation
    try {
      const response = await fetch(`${this.url(instance)}${route}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${user}`, 'content-type': 'application/json', 'idempotency-key': key },
        body: text,
        signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
      })
      const answer = await response.text()
      let code: string | undefined
      let charge: string | undefined
      try {
        const parsed = JSON.parse(answer) as { code?: unknown; charge?: unknown }
        if (typeof parsed.code === 'string') code = parsed.code
        if (route === '/resumes' && response.ok && typeof parsed.charge === 'string') charge = parsed.charge
      } catch {
        // not JSON
      }
      const retryAfter = response.headers.get('retry-after')
      operation = {
        ...base,
        end: this.now(),
        status: response.status,
        outcome: 'answer',
        ...(code === undefined ? {} : { code }),
        replayed: response.headers.get('idempotent-replayed') === 'true',
        ...(retryAfter === null ? {} : { retryAfter }),
        responseHash: hash(answer),
        ...(charge === undefined ? {} : { charge }),
      }
    } catch (error) {
      const timedOut = (error as Error).name === 'TimeoutError'
      operation = {
        ...base,
        end: this.now(),
        status: 0,
        outcome: timedOut ? 'timeout' : 'error',
        replayed: false,
        ...(timedOut ? {} : { error: String((error as Error).cause ?? error).slice(0, 200) }),
      }
    }
    this.operations.push(operation)
    return operation
  }

  /**
   * Client `c`: new keys until `loadEnd`, each retried as a real client does; half of them
   * deposits where the store keeps the deposits' rows (`deposits`).
   */
  async client(c: number, seed: number, loadEnd: number, deposits: boolean): Promise<void> {
    const random = mulberry32(seed * 1_000 + c + 1)
    const other = (not: number) => (not + 1 + Math.floor(random() * 2)) % 3
    const user = `u${c}`
    for (let n = 0; this.now() < loadEnd; n++) {
      const shared = n % 6 === 5
      const key = shared ? `s${seed}-shared-k${n}` : `s${seed}-c${c}-k${n}`
      const pick = random()
      const route: Route = shared
        ? (SENT_ROUTES[Math.floor(n / 6) % SENT_ROUTES.length] as Route)
        : deposits && pick < 0.3
          ? '/deposits'
          : pick < (deposits ? 0.45 : 0.25)
            ? '/orders'
            : pick < (deposits ? 0.7 : 0.6)
              ? '/takeovers'
              : pick < (deposits ? 0.85 : 0.8)
                ? '/resumes'
                : '/waits'
      const lease = route === '/resumes' ? RESUME_LEASE_MS : TAKEOVER_LEASE_MS
      const stall = (route === '/takeovers' || route === '/resumes') && !shared && random() < 1 / 3
      const body: Record<string, unknown> =
        route === '/deposits'
          ? { account: `a${Math.floor(random() * 4)}`, amount: 1 + Math.floor(random() * 9) }
          : shared
            ? { item: `shared-${n}`, qty: 1, delayMs: 100 }
            : {
                item: `i${n}`,
                qty: 1 + Math.floor(random() * 3),
                delayMs: Math.floor(random() * (route === '/waits' ? 600 : 300)),
                ...(stall ? { stallMs: lease + 300 + Math.floor(random() * 500) } : {}),
              }
      this.keys.push({ client: c, user, key, route, body })
      let instance = Math.floor(random() * 3)
      const pending: Promise<unknown>[] = []
      // A duplicate sent at once to another instance (a double submit, or a retry after a short
      // timeout); most keys on the waiting route.
      if (random() < (route === '/waits' ? 0.7 : 0.2)) {
        const twin = other(instance)
        const wait = Math.floor(random() * 100)
        pending.push(sleep(wait).then(() => this.send(c, user, key, route, body, twin)))
      }
      // A hedged retry on the takeover and resume routes: once the first request has run longer
      // than the lease, the same request to another instance (which takes the key over, or
      // resumes its run, if its lease ran out).
      let firstAnswered = false
      if (route === '/takeovers' || route === '/resumes') {
        const twin = other(instance)
        const hedgeAfter = lease + 100 + Math.floor(random() * 300)
        pending.push(
          sleep(hedgeAfter).then(() =>
            firstAnswered ? undefined : this.send(c, user, key, route, body, twin, { hedge: true }),
          ),
        )
      }
      const began = this.now()
      for (let attempt = 1; attempt <= 12 && this.now() - began < 45_000; attempt++) {
        const answer = await this.send(c, user, key, route, body, instance)
        firstAnswered = true
        if (answer.outcome === 'answer' && answer.status >= 200 && answer.status < 300) {
          if (random() < 0.15) {
            // The same key with another body: 422 expected.
            const changed =
              route === '/deposits'
                ? { ...body, amount: (body.amount as number) + 1 }
                : { ...body, qty: (body.qty as number) + 1 }
            await this.send(c, user, key, route, changed, other(instance), { changed: true })
          }
          break
        }
        if (answer.outcome === 'answer' && answer.status === 409) {
          await sleep(Math.min(3_000, Number(answer.retryAfter ?? 1) * 1_000))
        } else if (
          answer.outcome === 'answer' &&
          answer.status === 503 &&
          (answer.code === 'IDEMPOTENCY_STORE_UNAVAILABLE' || answer.code === 'HANDLER_RETRYABLE')
        ) {
          await sleep(Math.min(2_000, Number(answer.retryAfter ?? 1) * 1_000))
        } else if (answer.outcome !== 'answer') {
          await sleep(200)
        } else {
          // 422, recovery-required or anything else: a real client stops and asks.
          break
        }
        instance = other(instance)
      }
      await Promise.all(pending)
      await sleep(Math.floor(random() * 100))
    }
  }

  /** The final probe of every key (the same request once more), `clients` at a time: its answer is the key's final state. */
  async probe(seed: number, clients: number): Promise<void> {
    const probeRandom = mulberry32(seed + 99)
    const queue = [...this.keys]
    await Promise.all(
      Array.from({ length: clients }, async () => {
        for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
          await this.send(next.client, next.user, next.key, next.route, next.body, Math.floor(probeRandom() * 3), {
            probe: true,
          })
        }
      }),
    )
  }
}
