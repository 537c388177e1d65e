/**
 * The fault app's stepped route on PostgreSQL (fault 24): POST /transfers, `transaction: true`
 * and `resume: true`, with `{ account, amount }`. Two steps, each committed with its recovery
 * point: `reserve` and `charge` each insert one row into `fault_steps`; after the last one the
 * handler inserts a `final` row, which commits with the answer. Every row carries the fencing
 * token and PID that wrote it, so the table says which execution did what.
 *
 * Headers: `x-crash-at: after-reserve | after-charge` SIGKILLs the process right after that
 * step committed; `x-hold-in-charge-ms` holds the `charge` step after its insert, before its
 * commit (a `charge-written` line is logged first), so a test can pause the process there.
 */
import type { FastifyInstance } from 'fastify'
import type { TransactionClient } from '../../../src/core/store-transaction.js'
import { sleep } from '../../helpers/sleep.js'
import { record } from './common.js'

export const FAULT_STEPS_TABLE = `CREATE TABLE IF NOT EXISTS fault_steps (id bigserial PRIMARY KEY, principal text NOT NULL,
  key text NOT NULL, step text NOT NULL, token int NOT NULL, pid int NOT NULL)`

/** Adds POST /transfers to `app` (the plugin registered, on the PostgreSQL store). */
export function transferRoutes(app: FastifyInstance): void {
  app.post<{ Body: { account: string; amount: number } }>(
    '/transfers',
    {
      schema: {
        body: {
          type: 'object',
          required: ['account', 'amount'],
          additionalProperties: false,
          properties: { account: { type: 'string', minLength: 1, maxLength: 64 }, amount: { type: 'integer' } },
        },
      },
      config: { idempotency: { transaction: true, resume: true } },
    },
    async (request, reply) => {
      const info = request.idempotency
      if (info === null || info === undefined) throw new Error('POST /transfers needs an Idempotency-Key')
      const key = String(request.headers['idempotency-key'])
      const token = info.fencingToken
      const base = { route: '/transfers', key, user: request.user, pid: process.pid, token }
      const crashAt = request.headers['x-crash-at']
      const holdMs = Math.min(30_000, Number(request.headers['x-hold-in-charge-ms'] ?? 0))
      record({ type: 'execution', ...base })
      const insert = async (db: TransactionClient, step: string) => {
        const { rows } = await db.query<{ id: string }>(
          'INSERT INTO fault_steps (principal, key, step, token, pid) VALUES ($1, $2, $3, $4, $5) RETURNING id',
          [request.user, key, step, token, process.pid],
        )
        return Number(rows[0]?.id)
      }
      const reserve = await info.step('reserve', async (db) => ({ id: await insert(db, 'reserve'), token }))
      if (crashAt === 'after-reserve') process.kill(process.pid, 'SIGKILL')
      const charge = await info.step('charge', async (db) => {
        const id = await insert(db, 'charge')
        record({ type: 'charge-written', ...base })
        if (holdMs > 0) await sleep(holdMs)
        return { id, token }
      })
      if (crashAt === 'after-charge') process.kill(process.pid, 'SIGKILL')
      const final = await insert(info.db as TransactionClient, 'final')
      return reply.code(201).send({ account: request.body.account, reserve, charge, final, token })
    },
  )
}
