/**
 * The example APIs' business logic, shared by the Fastify and Express apps: orders and account
 * deposits kept in this process's memory, per principal, so a caller can count executions.
 *
 * It does what docs/guarantees.md asks of a handler behind idempotency: it stops when the execution's
 * `signal` fires (another execution may have taken the scope over), and every write carries the
 * execution's fencing token, which the write refuses when it is lower than the last token it
 * accepted for that scope (a stale owner woken up after a takeover writes nothing).
 */
import { randomUUID } from 'node:crypto'

export interface Order {
  readonly id: string
  readonly item: string
  readonly qty: number
  readonly createdAt: string
}

export interface OrderInput {
  readonly item: string
  readonly qty: number
  readonly delayMs?: number
  readonly fail?: 'retryable' | 'unknown'
}

/** What a write needs to know of the execution it runs in (`request.idempotency`). */
export interface Execution {
  /** Fires when the scope may have been taken over: stop, write nothing. */
  readonly signal: AbortSignal
  /** The execution's attempt number; grows on every takeover of the scope. */
  readonly fencingToken: number
  /** Names the scope (the digest prefix): tokens are compared per scope. */
  readonly digest: string
}

/** A retryable failure: the handler did nothing, a retry may run again (FAILED_RETRYABLE). */
export class RetryableError extends Error {
  readonly statusCode = 503
  readonly retryable = true
}

/** The execution lost its lease, or a newer one wrote first: nothing was written. */
export class FencedError extends RetryableError {}

/** Waits `ms`, or less when `signal` fires. */
export function sleep(ms: number, signal?: AbortSignal | null): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve()
    const timer = setTimeout(resolve, ms)
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer)
        resolve()
      },
      { once: true },
    )
  })
}

export class Shop {
  private readonly orders = new Map<string, Order[]>()
  private readonly balances = new Map<string, number>()
  /** The highest fencing token each scope's writes accepted. */
  private readonly fences = new Map<string, number>()

  /**
   * Creates an order after `delayMs`; `fail: 'retryable'` throws a RetryableError (503, nothing
   * created), `fail: 'unknown'` throws a plain error (500, as if the effect were unknown). When
   * the execution's signal fires, or a newer execution of the same scope wrote first, it throws a
   * FencedError and creates nothing.
   */
  async createOrder(principal: string, input: OrderInput, execution?: Execution | null): Promise<Order> {
    await sleep(input.delayMs ?? 0, execution?.signal)
    if (input.fail === 'retryable') throw new RetryableError('The order service is busy; nothing was created.')
    if (input.fail === 'unknown') throw new Error('The order service failed; the order may or may not exist.')
    this.fence(execution)
    const order: Order = { id: randomUUID(), item: input.item, qty: input.qty, createdAt: new Date().toISOString() }
    this.orders.set(principal, [...(this.orders.get(principal) ?? []), order])
    return order
  }

  ordersOf(principal: string): readonly Order[] {
    return this.orders.get(principal) ?? []
  }

  /** Adds `amount` to the account's balance, fenced like `createOrder`. */
  deposit(principal: string, accountId: string, amount: number, execution?: Execution | null) {
    this.fence(execution)
    const account = `${principal}/${accountId}`
    const balance = this.balanceOf(principal, accountId) + amount
    this.balances.set(account, balance)
    return { accountId, depositId: randomUUID(), amount, balance }
  }

  balanceOf(principal: string, accountId: string): number {
    return this.balances.get(`${principal}/${accountId}`) ?? 0
  }

  /**
   * The check every write makes first, in the same synchronous step as the write: the signal
   * has not fired, and no higher token of the scope was accepted before. Without an execution
   * (an unprotected request) there is nothing to fence.
   */
  private fence(execution: Execution | null | undefined): void {
    if (execution === null || execution === undefined) return
    if (execution.signal.aborted) {
      throw new FencedError('This execution lost its lease (the request may be taken over); nothing was written.')
    }
    const last = this.fences.get(execution.digest) ?? 0
    if (execution.fencingToken < last) {
      throw new FencedError('A newer execution of this request wrote first; nothing was written.')
    }
    this.fences.set(execution.digest, execution.fencingToken)
  }
}
