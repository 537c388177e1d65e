/**
 * GitHub's webhook signature, with node:crypto: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256
 * of the raw body under the webhook's secret. The example app checks it on the raw body before
 * anything else; the tests sign their deliveries with it.
 */
import { createHmac, timingSafeEqual } from 'node:crypto'

/** The `X-Hub-Signature-256` header of `body`. */
export function signGitHubPayload(body: string | Buffer, secret: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`
}

/** Whether `header` signs `body` with `secret` (compared in constant time). */
export function verifyGitHubSignature(body: Buffer, header: string | undefined, secret: string): boolean {
  if (header === undefined || !/^sha256=[0-9a-f]{64}$/.test(header)) return false
  return timingSafeEqual(Buffer.from(header), Buffer.from(signGitHubPayload(body, secret)))
}
