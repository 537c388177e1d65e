/**
 * The example APIs' business logic, shared by the Fastify and Express apps: orders and account
 * deposits kept in this process's memory, per principal, so a caller can count executions.
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

/** A retryable failure: the handler did nothing, a retry may run again (FAILED_RETRYABLE). */
export class RetryableError extends Error {
  readonly statusCode = 503
  readonly retryable = true
}

/** Waits `ms`, or less when `signal` fires (the scope was taken over: stop working). */
export function sleep(ms: number, signal?: AbortSignal | null): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms)
    signal?.addEventListener('abort', () => {
      clearTimeout(timer)
      resolve()
    })
  })
}

export class Shop {
  private readonly orders = new Map<string, Order[]>()
  private readonly balances = new Map<string, number>()

  /**
   * Creates an order after `delayMs`; `fail: 'retryable'` throws a RetryableError (503, nothing
   * created), `fail: 'unknown'` throws a plain error (500, as if the effect were unknown).
   */
  async createOrder(principal: string, input: OrderInput, signal?: AbortSignal | null): Promise<Order> {
    await sleep(input.delayMs ?? 0, signal)
    if (input.fail === 'retryable') throw new RetryableError('The order service is busy; nothing was created.')
    if (input.fail === 'unknown') throw new Error('The order service failed; the order may or may not exist.')
    const order: Order = { id: randomUUID(), item: input.item, qty: input.qty, createdAt: new Date().toISOString() }
    this.orders.set(principal, [...(this.orders.get(principal) ?? []), order])
    return order
  }

  ordersOf(principal: string): readonly Order[] {
    return this.orders.get(principal) ?? []
  }

  deposit(principal: string, accountId: string, amount: number) {
    const account = `${principal}/${accountId}`
    const balance = this.balanceOf(principal, accountId) + amount
    this.balances.set(account, balance)
    return { accountId, depositId: randomUUID(), amount, balance }
  }

  balanceOf(principal: string, accountId: string): number {
    return this.balances.get(`${principal}/${accountId}`) ?? 0
  }
}
