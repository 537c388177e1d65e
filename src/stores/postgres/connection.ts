/**
 * The PostgreSQL store's one way to a connection, `withClient`: a connection checked out of the
 * application's pool within `acquireTimeoutMs`, every statement answered within
 * `statementTimeoutMs`, the connection back to the pool after a reply and destroyed after anything
 * else (so nothing ever reads what a failed call left on it), and, for a call of a record given up
 * on, its server session ended before that record is called again.
 */
import { StoreIndeterminateError, StoreUnavailableError } from '../../core/errors.js'
import { brokenBy, isSerializationFailure, postgresFault, SERIALIZATION_TRIES } from './faults.js'

/** A query as the store sends it: a named prepared statement, rows as arrays. */
export interface PostgresQuery {
  readonly name: string
  readonly text: string
  readonly values: unknown[]
  readonly rowMode: 'array'
}

/** What the store uses of a checked-out `pg.PoolClient`. */
export interface PostgresClient {
  query(query: PostgresQuery): Promise<{ rows: unknown[][] }>
  query(text: string): Promise<unknown>
  /** node-postgres 8.11+: 'I' idle, 'T' in a transaction, 'E' in a failed transaction. */
  getTransactionStatus?(): string | null
  /** Back to the pool; with an error, the pool destroys the connection instead. */
  release(error?: Error | boolean): void
  /** The server session's process ID (node-postgres: from BackendKeyData). */
  readonly processID?: number | null
  /** The store listens for `'error'` while it holds the connection (node-postgres emits one when the socket dies). */
  on(event: 'error', listener: (error: Error) => void): unknown
  removeListener(event: 'error', listener: (error: Error) => void): unknown
}

/** What the store uses of a `pg.Pool` (node-postgres): `connect()`. */
export interface PostgresPool {
  connect(): Promise<PostgresClient>
}

/** A statement's reply: its rows (arrays, for a `PostgresQuery`) and its command tag. */
export interface QueryReply {
  readonly rows: unknown[][]
  readonly command?: string
}

/** What the connection needs of the store's settings. */
export interface ConnectionSettings {
  readonly pool: PostgresPool
  readonly acquireTimeoutMs: number
  readonly statementTimeoutMs: number
}

/**
 * Ends a server session and waits for it to be gone (`pg_terminate_backend`, PostgreSQL 14+).
 * The same text for every table and schema version, so one name serves every store.
 */
const END_SESSION = {
  name: 'idemkit_end_session',
  text: 'SELECT pg_terminate_backend($1::int, $2::bigint) OR NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1::int)',
}

/** A connection checked out for one `withClient` callback. */
export class Session {
  /** The checked-out connection. Given back (or destroyed) by `withClient`, never by its user. */
  readonly client: PostgresClient
  readonly #statementTimeoutMs: number
  #discarded: Error | undefined

  constructor(client: PostgresClient, statementTimeoutMs: number) {
    this.client = client
    this.#statementTimeoutMs = statementTimeoutMs
  }

  /**
   * Sends `query` and waits at most `statementTimeoutMs` for its reply; then rejects with
   * StoreIndeterminateError (the statement may still run: the connection is destroyed).
   */
  send(query: PostgresQuery | string): Promise<QueryReply> {
    return timedQuery(this.client, query, this.#statementTimeoutMs)
  }

  /** Destroys the connection instead of giving it back when the callback ends (a ROLLBACK that failed). */
  discard(reason: Error): void {
    this.#discarded ??= reason
  }

  /** Why the connection is to be destroyed, if it is. */
  get discarded(): Error | undefined {
    return this.#discarded
  }
}

/** The pool as the store uses it: see the header. */
export class Connection {
  readonly #pool: PostgresPool
  readonly #acquireTimeoutMs: number
  readonly #statementTimeoutMs: number
  /** Records whose last call got no reply and whose session could not be ended yet: key to its PID. */
  readonly #undecided = new Map<string, number>()
  #closed = false

  constructor(settings: ConnectionSettings) {
    this.#pool = settings.pool
    this.#acquireTimeoutMs = settings.acquireTimeoutMs
    this.#statementTimeoutMs = settings.statementTimeoutMs
  }

  /** From now on nothing is sent: every call answers StoreUnavailableError. The pool is the application's. */
  close(): void {
    this.#closed = true
  }

  /**
   * Runs `use` on a connection of its own and gives the connection back once it settles: to the
   * pool after a reply (an ERROR included), destroyed after anything else or when `use` discarded
   * it. When a statement of `use` got no reply in time, the server session is ended in the
   * background (but for the call that ends one: `endOnTimeout` false); when `key` names a
   * record, no later call of that record is sent before it is gone (then the lost statement has
   * either been applied or never will be, and inspecting tells which). A connection that arrives
   * after `acquireTimeoutMs` goes straight back.
   * @throws StoreUnavailableError when no connection could be had (nothing was sent), or an
   *   earlier call of `key` got no reply and its session is still there; else what `use` throws.
   */
  async withClient<T>(use: (session: Session) => Promise<T>, key?: string, endOnTimeout = true): Promise<T> {
    const earlier = key === undefined ? undefined : this.#undecided.get(key)
    if (earlier !== undefined) {
      // An earlier call of this record got no reply and its session is not known to be gone:
      // that call may still be applied, so no call of the record is answered (an inspect would
      // read a record it may still change) until the session is ended.
      if (!(await this.#endSession(earlier))) {
        throw new StoreUnavailableError(
          'An earlier call of this record got no reply and its PostgreSQL session is still there (it may still be ' +
            'applied); nothing was sent. Try again once it is gone.',
        )
      }
      this.#undecided.delete(key as string)
    }
    const client = await this.#acquire()
    // A connection checked out of a pg.Pool has no 'error' listener of the pool's: a socket
    // that dies under the call would otherwise throw from the client's emitter. The call's own
    // rejection is what counts; the listener goes once the connection is back in the pool,
    // whose listener takes over.
    client.on('error', ignore)
    const session = new Session(client, this.#statementTimeoutMs)
    let failure: { readonly error: unknown } | undefined
    try {
      return await use(session)
    } catch (error) {
      failure = { error }
      throw error
    } finally {
      client.release(session.discarded ?? (failure === undefined ? undefined : brokenBy(failure.error)))
      client.removeListener('error', ignore)
      // No reply in time. Closing the connection does not stop a statement the server is
      // running (or has yet to read): it could still land after the caller inspected the record
      // on another connection of the pool and found nothing, and a call of no record (a sweep)
      // would run on, holding what it locked, for as long as it takes. So the session is ended
      // on the server, and no later call of the record is sent before it is gone.
      const pid = client.processID
      if (failure?.error instanceof StoreIndeterminateError && endOnTimeout && typeof pid === 'number') {
        const ending = this.#endSession(pid)
        if (key !== undefined) {
          this.#undecided.set(key, pid)
          void ending.then((ended) => {
            if (ended && this.#undecided.get(key) === pid) this.#undecided.delete(key)
          })
        }
      }
    }
  }

  /**
   * `query` on a connection of its own (`withClient`), all its rows, about the record under
   * `key` if any. A serialization failure or a deadlock (SQLSTATE 40001, 40P01: under REPEATABLE
   * READ or SERIALIZABLE, e.g. a database-wide `default_transaction_isolation`, a claim that
   * waited for a concurrent takeover) rolled the statement's own transaction back, so nothing was
   * applied: it is sent again, up to `SERIALIZATION_TRIES` times in all, instead of failing the call.
   * @throws StoreUnavailableError (not applied) or StoreIndeterminateError (maybe applied): faults.ts.
   */
  async query(query: PostgresQuery, key?: string): Promise<{ rows: unknown[][] }> {
    for (let tries = 1; ; tries++) {
      try {
        return await this.#queryOnce(query, key)
      } catch (error) {
        if (!isSerializationFailure(error) || tries >= SERIALIZATION_TRIES) throw error
        // A little apart, so the calls that collided do not collide again.
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 5 * tries))
      }
    }
  }

  /** One send of `query` (see `query`). */
  async #queryOnce(query: PostgresQuery, key: string | undefined): Promise<{ rows: unknown[][] }> {
    try {
      return await this.withClient((session) => session.send(query), key)
    } catch (error) {
      if (!(error instanceof StoreIndeterminateError)) throw postgresFault(error, true)
      throw new StoreIndeterminateError(
        `PostgreSQL did not answer within ${this.#statementTimeoutMs} ms (statementTimeoutMs); the call may or may not ` +
          'have been applied: inspect the record to find out (its server session is ended first).',
        { cause: error },
      )
    }
  }

  /**
   * Ends the server session `pid` from another connection and waits for it to be gone, at most
   * `statementTimeoutMs`.
   * @returns whether it is gone: its last statement is then either applied or rolled back.
   */
  async #endSession(pid: number): Promise<boolean> {
    try {
      const values = [pid, Math.max(1, this.#statementTimeoutMs - 100)]
      const { rows } = await this.withClient(
        (session) => session.send({ ...END_SESSION, values, rowMode: 'array' }),
        undefined,
        false,
      )
      return rows[0]?.[0] === true
    } catch {
      return false
    }
  }

  /**
   * A connection from the pool within `acquireTimeoutMs`, else `StoreUnavailableError`. A
   * connection that arrives after the store gave up on it goes straight back to the pool.
   */
  #acquire(): Promise<PostgresClient> {
    if (this.#closed)
      return Promise.reject(new StoreUnavailableError('The PostgreSQL store is closed; nothing was sent.'))
    return new Promise((resolve, reject) => {
      let waiting = true
      const timer = setTimeout(() => {
        waiting = false
        reject(
          new StoreUnavailableError(
            `The pool gave no PostgreSQL connection within ${this.#acquireTimeoutMs} ms (acquireTimeoutMs); nothing was sent.`,
          ),
        )
      }, this.#acquireTimeoutMs)
      let connecting: Promise<PostgresClient>
      try {
        connecting = this.#pool.connect()
      } catch (error) {
        clearTimeout(timer)
        reject(postgresFault(error, false))
        return
      }
      connecting.then(
        (client) => {
          clearTimeout(timer)
          if (waiting) resolve(client)
          else client.release()
        },
        (error: unknown) => {
          clearTimeout(timer)
          if (waiting) reject(postgresFault(error, false))
        },
      )
    })
  }
}

/** The connection's `'error'` listener while the store holds it: the call's own rejection is what counts. */
function ignore(): void {}

/**
 * Sends `query` on `client` and waits at most `timeoutMs` for the reply; then rejects with
 * StoreIndeterminateError (the statement may still run: the caller destroys the connection).
 */
function timedQuery(client: PostgresClient, query: PostgresQuery | string, timeoutMs: number): Promise<QueryReply> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(
        new StoreIndeterminateError(
          `PostgreSQL did not answer within ${timeoutMs} ms (statementTimeoutMs); ` +
            'the call may or may not have been applied: inspect the record to find out.',
        ),
      )
    }, timeoutMs)
    let sent: Promise<QueryReply>
    try {
      sent = (typeof query === 'string' ? client.query(query) : client.query(query)) as Promise<QueryReply>
    } catch (error) {
      clearTimeout(timer)
      reject(error)
      return
    }
    sent.then(
      (result) => {
        clearTimeout(timer)
        resolve(result)
      },
      (error: unknown) => {
        clearTimeout(timer)
        reject(error)
      },
    )
  })
}
