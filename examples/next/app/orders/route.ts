/**
 * POST /orders as a Next.js App Router route handler on the Node runtime, with `idemkit/fetch`:
 * the README's Quick start as a Next.js app (the same curl answers 201, then the replay, then 422
 * for another body with that key). `withIdempotency` takes a Web-standard handler and returns one.
 *
 *   npm install idemkit ioredis
 *   IDEMPOTENCY_SECRET=$(openssl rand -hex 32) REDIS_URL=redis://127.0.0.1:6379 npx next build && npx next start
 *
 * next.config.ts lists idemkit in `serverExternalPackages`: Node loads it as installed (it reads
 * its Redis scripts from its own folder) instead of the bundler copying it. The wrapped handler is
 * made on the first request, not when `next build` loads this module, so the build needs neither
 * the secret nor Redis. `delayMs` in the body (at most 30000) makes an order slow, to see the 409
 * a retry gets while the first request still runs.
 */
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { type FetchHandler, idempotencyOf, redisStore, withIdempotency } from 'idemkit/fetch'
import { Redis } from 'ioredis'

export const runtime = 'nodejs'

async function createOrder(request: Request): Promise<Response> {
  const { delayMs = 0, ...order } = (await request.json()) as { delayMs?: number; item?: string; qty?: number }
  // The signal fires when another execution took the key over: stop before any effect.
  await sleep(Math.min(Number(delayMs) || 0, 30_000), undefined, { signal: idempotencyOf(request)?.signal })
  const created = { id: randomUUID(), ...order }
  return Response.json(created, { status: 201, headers: { location: `/orders/${created.id}` } })
}

async function protect(): Promise<FetchHandler> {
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', {
    commandTimeout: 2000,
    maxRetriesPerRequest: 1,
    autoResendUnfulfilledCommands: false,
  })
  const store = redisStore({ redis })
  await store.verify() // refuses a Redis that may evict records
  return withIdempotency(createOrder, {
    store,
    secrets: { current: 1, keys: { 1: process.env.IDEMPOTENCY_SECRET } },
    principal: (request) => /^Bearer (\w+)$/.exec(request.headers.get('authorization') ?? '')?.[1], // who owns the key
  })
}

let protectedHandler: Promise<FetchHandler> | undefined

export async function POST(request: Request): Promise<Response> {
  // Once per server process; a failure (Redis down, no secret) is tried again by the next request.
  protectedHandler ??= protect().catch((error: unknown) => {
    protectedHandler = undefined
    throw error
  })
  return (await protectedHandler)(request)
}
