/**
 * How the Redis store sends a call on its client: refused before sending while the client is not
 * ready (`failFast`), the socket's writes held back to the end of the turn (`coalesceWrites`),
 * every error after that read by `redisFault`; and which connection the calls go out on now.
 */
import type { Socket } from 'node:net'
import type { Cluster, Redis } from 'ioredis'
import { StoreUnavailableError } from '../../core/errors.js'
import { redisFault, rethrowClassified } from './faults.js'
import type { ScriptCommand } from './script-calls.js'

/** The store's client and the way every call goes out on it. */
export class Connection {
  readonly redis: Redis | Cluster
  readonly #failFast: boolean
  readonly #coalesceWrites: boolean
  /** True from the cork until the `setImmediate` that uncorks. */
  #corked = false

  constructor(redis: Redis | Cluster, failFast: boolean, coalesceWrites: boolean) {
    this.redis = redis
    this.#failFast = failFast
    this.#coalesceWrites = coalesceWrites
  }

  /** The connection commands go out on now (a new socket after every reconnect); undefined on a Cluster. */
  socket(): unknown {
    return this.redis.isCluster ? undefined : (this.redis as Redis).stream
  }

  /**
   * Whether a call may be sent now: false with `failFast` while the client is not ready (nothing
   * is sent, so nothing waits in ioredis's offline queue); else true, the socket corked first
   * with `coalesceWrites`.
   */
  mayWrite(): boolean {
    if (this.#failFast && this.redis.status !== 'ready') return false
    if (this.#coalesceWrites) this.#coalesce()
    return true
  }

  /**
   * Sends one script call. With failFast, a client that is not ready is refused here, before
   * anything reaches ioredis's offline queue; every error after that goes through
   * `redisFault`. No retry here: a function the node lacks is loaded and sent again once
   * (`ScriptCalls`), and ioredis re-sends a script as EVAL on NOSCRIPT.
   */
  send(command: ScriptCommand, key: string, args: (string | Uint8Array)[]): Promise<unknown> {
    return this.sendRaw(command, key, args).then(undefined, rethrowClassified)
  }

  /** `send` with the client's own error, for a caller that reads it before `redisFault`. */
  sendRaw(command: ScriptCommand, key: string, args: (string | Uint8Array)[]): Promise<unknown> {
    if (!this.mayWrite()) {
      return Promise.reject(
        new StoreUnavailableError(
          `The Redis client is not ready (status "${this.redis.status}"); the call was not sent.`,
        ),
      )
    }
    try {
      return command(key, ...args)
    } catch (error) {
      return Promise.reject(redisFault(error))
    }
  }

  /**
   * `coalesceWrites`: corks the client's socket for the rest of this turn of the event loop,
   * once per turn. A Cluster client has no single socket and is left as it is.
   */
  #coalesce(): void {
    if (this.#corked) return
    const stream = (this.redis as { stream?: unknown }).stream as Socket | undefined
    if (stream === undefined || stream === null || typeof stream.cork !== 'function') return
    this.#corked = true
    stream.cork()
    setImmediate(() => {
      this.#corked = false
      stream.uncork()
    })
  }
}
