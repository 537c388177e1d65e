// A Next.js App Router route file (app/orders/route.mjs) as a user writes it with idemkit/fetch:
// nothing installed but idemkit. next-server.mjs serves it as `next start` calls it.
import { idempotency, idempotencyOf, memoryStore } from 'idemkit/fetch'

const idem = idempotency({
  store: memoryStore(),
  secrets: { current: 1, keys: { 1: 'consumer-secret-'.repeat(2) } },
  anonymous: true,
})

let orders = 0

// Next.js calls a route handler with the request and { params }: the wrapper hands them on.
export const POST = idem(
  async (request, context) => {
    await context.params
    if (idempotencyOf(request) === null) throw new Error('the handler ran unprotected')
    orders += 1
    return Response.json({ order: orders, ...(await request.json()) }, { status: 201 })
  },
  { leaseMs: 5_000 },
)
