/**
 * Account balances and stock reservations in PostgreSQL, used by both example apps when
 * DATABASE_URL is set. A deposit
 * is written through the transaction the idempotency layer opened for the request
 * (`idempotency.db` on a `transaction: true` route): the deposit row, the new balance and the
 * stored answer commit together, or none of them does, so a balance moves exactly once per
 * key, whatever crashes (docs/postgresql.md, exactly once with `transaction: true`). A checkout's
 * reservation is written in a step (`idempotency.step('reserve', ...)`): it commits with its
 * recovery point before the charge, and a re-run of the checkout gets it back instead of
 * reserving again (docs/across-services.md).
 */
import type pg from 'pg'
import type { TransactionClient } from '../src/index.js'

export interface Deposit {
  readonly accountId: string
  readonly depositId: string
  readonly amount: number
  readonly balance: number
}

export interface Reservation {
  readonly reservationId: string
  readonly item: string
  readonly qty: number
}

export class Ledger {
  readonly #pool: pg.Pool

  constructor(pool: pg.Pool) {
    this.#pool = pool
  }

  /**
   * Creates the example's two tables when they do not exist. Instances starting together would
   * race on CREATE TABLE IF NOT EXISTS, so the statements run as one transaction behind an
   * advisory lock.
   */
  async migrate(): Promise<void> {
    await this.#pool.query(`
      SELECT pg_advisory_xact_lock(hashtext('idemkit example tables'));
      CREATE TABLE IF NOT EXISTS example_balances (
        principal text NOT NULL, account_id text NOT NULL, balance bigint NOT NULL,
        PRIMARY KEY (principal, account_id));
      CREATE TABLE IF NOT EXISTS example_deposits (
        deposit_id uuid PRIMARY KEY DEFAULT gen_random_uuid(), principal text NOT NULL,
        account_id text NOT NULL, amount bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
      CREATE TABLE IF NOT EXISTS example_reservations (
        reservation_id uuid PRIMARY KEY DEFAULT gen_random_uuid(), principal text NOT NULL,
        item text NOT NULL, qty integer NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`)
  }

  /** Records a deposit and moves the balance, in the request's transaction `db`. */
  async deposit(db: TransactionClient, principal: string, accountId: string, amount: number): Promise<Deposit> {
    const inserted = await db.query<{ deposit_id: string }>(
      'INSERT INTO example_deposits (principal, account_id, amount) VALUES ($1, $2, $3) RETURNING deposit_id',
      [principal, accountId, amount],
    )
    const moved = await db.query<{ balance: string }>(
      `INSERT INTO example_balances AS b (principal, account_id, balance) VALUES ($1, $2, $3)
       ON CONFLICT (principal, account_id) DO UPDATE SET balance = b.balance + EXCLUDED.balance
       RETURNING balance`,
      [principal, accountId, amount],
    )
    return {
      accountId,
      depositId: inserted.rows[0]?.deposit_id as string,
      amount,
      balance: Number(moved.rows[0]?.balance),
    }
  }

  /** Holds `qty` of `item` for a checkout, in the step's transaction `db`. */
  async reserve(db: TransactionClient, principal: string, item: string, qty: number): Promise<Reservation> {
    const { rows } = await db.query<{ reservation_id: string }>(
      'INSERT INTO example_reservations (principal, item, qty) VALUES ($1, $2, $3) RETURNING reservation_id',
      [principal, item, qty],
    )
    return { reservationId: rows[0]?.reservation_id as string, item, qty }
  }

  /** The principal's reservations: one per checkout key, however often it was re-run. */
  async reservationsOf(principal: string): Promise<Reservation[]> {
    const { rows } = await this.#pool.query<{ reservation_id: string; item: string; qty: number }>(
      'SELECT reservation_id, item, qty FROM example_reservations WHERE principal = $1 ORDER BY created_at',
      [principal],
    )
    return rows.map((row) => ({ reservationId: row.reservation_id, item: row.item, qty: row.qty }))
  }

  async balanceOf(principal: string, accountId: string): Promise<number> {
    const { rows } = await this.#pool.query<{ balance: string }>(
      'SELECT balance FROM example_balances WHERE principal = $1 AND account_id = $2',
      [principal, accountId],
    )
    return Number(rows[0]?.balance ?? 0)
  }

  /** How many deposits the account has: one per key, however often a request was retried. */
  async depositsOf(principal: string, accountId: string): Promise<number> {
    const { rows } = await this.#pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM example_deposits WHERE principal = $1 AND account_id = $2',
      [principal, accountId],
    )
    return rows[0]?.n ?? 0
  }
}
