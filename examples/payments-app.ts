/**
 * The example payment service on Fastify: charges behind Idempotency-Key, the downstream of the
 * order service's checkouts (docs/across-services.md). A charge is created once per key; every
 * retry with that key gets the first charge back.
 *
 *   npm run example:payments              # on port 3001, in-memory store
 *
 * Env: PORT (3001), HOST (127.0.0.1), REDIS_URL or DATABASE_URL, IDEMPOTENCY_SECRET.
 * `Authorization: Bearer <name>` names the calling service, whose keys are its own.
 */
import { randomUUID } from 'node:crypto'
import { pathToFileURL } from 'node:url'
import Fastify, { type FastifyInstance } from 'fastify'
import idempotency, { type IdempotencyStore } from '../plugins/fastify/index.js'
import { exampleEnvironment } from './environment.js'

export interface Charge {
  readonly id: string
  readonly customer: string
  readonly amount: number
  readonly createdAt: string
}

export interface PaymentsOptions {
  readonly store: IdempotencyStore
  readonly secret: string
  readonly logger?: boolean | object
}

/** Builds the payment service (not listening). `GET /charges` lists every charge made, to count them. */
export async function buildPaymentsApp(options: PaymentsOptions): Promise<FastifyInstance> {
  const app = Fastify({ logger: options.logger ?? false })
  const charges: Charge[] = []

  await app.register(idempotency, {
    store: options.store,
    secrets: { current: 1, keys: { 1: options.secret } },
    principal: (request) => /^Bearer ([A-Za-z0-9._~+/-]{1,64})$/.exec(request.headers.authorization ?? '')?.[1],
  })

  app.post<{ Body: { customer: string; amount: number } }>(
    '/charges',
    {
      config: { idempotency: true },
      schema: {
        body: {
          type: 'object',
          required: ['customer', 'amount'],
          additionalProperties: false,
          properties: {
            customer: { type: 'string', minLength: 1, maxLength: 200 },
            amount: { type: 'integer', minimum: 1 },
          },
        },
      },
    },
    async (request, reply) => {
      const charge: Charge = {
        id: `ch_${randomUUID()}`,
        customer: request.body.customer,
        amount: request.body.amount,
        createdAt: new Date().toISOString(),
      }
      charges.push(charge)
      request.log.info({ charge }, 'card charged')
      return reply.code(201).send(charge)
    },
  )

  app.get('/charges', async () => ({ charges }))
  return app
}

async function main(): Promise<void> {
  const env = await exampleEnvironment({ ...process.env, PORT: process.env.PORT ?? '3001' })
  const app = await buildPaymentsApp({ store: env.store, secret: env.secret, logger: true })
  for (const warning of env.warnings) app.log.warn(warning)
  app.addHook('onClose', () => env.close())
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      void app.close().then(() => process.exit(0))
    })
  }
  await app.listen({ port: env.port, host: env.host })
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((error) => {
    console.error(error)
    process.exit(1)
  })
}
