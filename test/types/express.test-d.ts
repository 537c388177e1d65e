import express, { type ErrorRequestHandler, type RequestHandler } from 'express'
import { describe, expectTypeOf, it } from 'vitest'
import idempotency, {
  type ExpressIdempotencyOptions,
  type IdempotencyInfo,
  memoryStore,
} from '../../plugins/express/index.js'

const secrets = { current: 1, keys: { 1: 'x'.repeat(32) } }

describe('Express middleware types', () => {
  it('returns a factory of request handlers with an error recorder', () => {
    const idem = idempotency({ store: memoryStore(), secrets, principal: (req) => req.get('authorization') })
    expectTypeOf(idem()).toEqualTypeOf<RequestHandler>()
    expectTypeOf(
      idem({ leaseMs: 5_000, expiredExecution: 'takeover', operation: 'deposit' }),
    ).toEqualTypeOf<RequestHandler>()
    expectTypeOf(idem.errors).toEqualTypeOf<ErrorRequestHandler>()
    const app = express()
    app.post('/orders', idem(), (_req, res) => {
      res.json({})
    })
    app.use(idem.errors)
  })

  it('rejects invalid route options', () => {
    const idem = idempotency({ store: memoryStore(), secrets, anonymous: true })
    // @ts-expect-error expiredExecution takes 'recover' or 'takeover' only
    idem({ expiredExecution: 'retry' })
    // @ts-expect-error leaseMs is a number
    idem({ leaseMs: '5s' })
  })

  it('requires store and secrets, and types the principal and fingerprint with Express requests', () => {
    // @ts-expect-error store and secrets are required
    idempotency({ anonymous: true })
    expectTypeOf<ExpressIdempotencyOptions['principal']>().toEqualTypeOf<
      ((request: express.Request) => string | undefined | Promise<string | undefined>) | undefined
    >()
  })

  it('adds req.idempotency as idempotency info or null', () => {
    const app = express()
    app.post('/x', (req, res) => {
      expectTypeOf(req.idempotency).toEqualTypeOf<IdempotencyInfo | null>()
      if (req.idempotency) {
        expectTypeOf(req.idempotency.fencingToken).toBeNumber()
        expectTypeOf(req.idempotency.signal).toEqualTypeOf<AbortSignal>()
        expectTypeOf(req.idempotency.replayed).toBeBoolean()
        expectTypeOf(req.idempotency.digest).toBeString()
      }
      res.end()
    })
  })
})
