/**
 * Stripe's webhook signature, with node:crypto: `Stripe-Signature: t=<unix seconds>,v1=<hex>`,
 * where v1 is HMAC-SHA256 of `<t>.<raw body>` under the endpoint's signing secret. The example
 * apps check it on the raw body before anything else; the tests sign their deliveries with it.
 */
import { createHmac, timingSafeEqual } from 'node:crypto'

/** How old a signature's timestamp may be, in seconds (Stripe's libraries use 300). */
export const STRIPE_TOLERANCE_SECONDS = 300

/** The `Stripe-Signature` header of `body`, signed now (or at `timestamp`, unix seconds). */
export function signStripePayload(body: string | Buffer, secret: string, timestamp = Math.floor(Date.now() / 1000)) {
  return `t=${timestamp},v1=${hmac(secret, timestamp, body)}`
}

/**
 * Whether `header` signs `body` with `secret`: one of its `v1` signatures matches, and its
 * timestamp is within the tolerance of now.
 */
export function verifyStripeSignature(body: Buffer, header: string | undefined, secret: string): boolean {
  if (header === undefined) return false
  const parts = header.split(',').map((part) => part.split('=', 2) as [string, string | undefined])
  const timestamp = Number(parts.find(([name]) => name === 't')?.[1])
  if (!Number.isSafeInteger(timestamp)) return false
  if (Math.abs(Date.now() / 1000 - timestamp) > STRIPE_TOLERANCE_SECONDS) return false
  const expected = Buffer.from(hmac(secret, timestamp, body), 'hex')
  return parts.some(([name, value]) => {
    if (name !== 'v1' || value === undefined || !/^[0-9a-f]{64}$/.test(value)) return false
    return timingSafeEqual(Buffer.from(value, 'hex'), expected)
  })
}

function hmac(secret: string, timestamp: number, body: string | Buffer): string {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest('hex')
}
