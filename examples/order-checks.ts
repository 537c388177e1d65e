/**
 * The checks of the example APIs' request bodies, for the examples whose framework validates
 * nothing itself (Hono, Web-standard handlers, Koa): the same rules and messages as the Fastify
 * example's JSON schemas, answered 400 before the idempotency layer runs.
 */

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value)
const isInteger = (value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): value is number =>
  Number.isSafeInteger(value) && (value as number) >= min && (value as number) <= max

/** `POST /orders` body: `{ item, qty, delayMs?, fail? }`, nothing else. */
export function orderError(body: unknown): string | undefined {
  if (!isObject(body)) return 'body must be object'
  const unknown = Object.keys(body).find((name) => !['item', 'qty', 'delayMs', 'fail'].includes(name))
  if (unknown !== undefined) return `body must NOT have additional property ${unknown}`
  if (typeof body.item !== 'string' || body.item.length < 1 || body.item.length > 200) {
    return 'body/item must be a string of 1 to 200 characters'
  }
  if (!isInteger(body.qty, 1)) return 'body/qty must be an integer >= 1'
  if (body.delayMs !== undefined && !isInteger(body.delayMs, 0, 30_000)) {
    return 'body/delayMs must be an integer from 0 to 30000'
  }
  if (body.fail !== undefined && body.fail !== 'retryable' && body.fail !== 'unknown') {
    return 'body/fail must be equal to one of the allowed values'
  }
  return undefined
}

/** `POST /accounts/:id/deposits`: `:id` is 1 to 64 of `[A-Za-z0-9_-]`, body `{ amount }` > 0. */
export function depositError(body: unknown, id: string): string | undefined {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(id)) return 'params/id must match pattern "^[A-Za-z0-9_-]{1,64}$"'
  if (!isObject(body)) return 'body must be object'
  const unknown = Object.keys(body).find((name) => name !== 'amount')
  if (unknown !== undefined) return `body must NOT have additional property ${unknown}`
  if (!isInteger(body.amount, 1)) return 'body/amount must be an integer >= 1'
  return undefined
}
