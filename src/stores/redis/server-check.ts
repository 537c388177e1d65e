/**
 * What the Redis store checks about the server behind it, on every (re)connection and in
 * `verify()`: its `maxmemory-policy` (an evicting policy can drop records early, and every
 * record has a TTL, so `volatile-*` policies evict them too) and its `run_id` (a new one means
 * the server restarted or failed over, and records it had not persisted are gone).
 */
import type { Cluster, Redis } from 'ioredis'
import { ErrorCode, IdempotencyError } from '../../core/errors.js'

/** What to do when Redis may evict records: refuse to run, or run and warn. */
export const UnsafeEviction = {
  REFUSE: 'refuse',
  WARN: 'warn',
} as const
export type UnsafeEviction = (typeof UnsafeEviction)[keyof typeof UnsafeEviction]

/** The only `maxmemory-policy` under which Redis never drops a record before its TTL. */
export const SAFE_EVICTION_POLICY = 'noeviction'

/** One Redis server as the store last saw it (one per Cluster master). */
export interface RedisServerReport {
  /** `host:port` of the server, or `sentinel:<name>` behind Sentinel (stable across failovers). */
  readonly node: string
  /** The server's `run_id`: a new one on every restart or failover. */
  readonly runId: string
  /** `maxmemory-policy`, or `'unknown'` when INFO was refused. */
  readonly maxmemoryPolicy: string
  /** True when the server writes an append-only file. */
  readonly aofEnabled: boolean
  /** Keys in all databases of the server when it was checked. */
  readonly keys: number
  /** `redis_version`, or `'unknown'` when INFO was refused. */
  readonly version: string
  /** Replicas connected to the server (`connected_slaves`); 0 when INFO was refused. */
  readonly replicas: number
}

/** What the Redis store reports about its servers (see `RedisStoreOptions.onEvent`). */
export type RedisStoreEvent =
  | {
      /**
       * The server's `run_id` changed since the store last saw it: Redis restarted or failed
       * over. Records written since its last persisted point are lost (all of them without
       * persistence); a retry of a lost key runs its handler again.
       */
      readonly type: 'redis-restarted'
      readonly node: string
      readonly previousRunId: string
      readonly runId: string
      readonly aofEnabled: boolean
      /** Keys the server holds now, in all databases. */
      readonly keys: number
      readonly message: string
    }
  | {
      /** The server's `maxmemory-policy` may evict records before their TTL. */
      readonly type: 'unsafe-eviction-policy'
      readonly node: string
      readonly policy: string
      /** `refused`: claims answer unavailable until the policy is `noeviction`. */
      readonly action: 'refused' | 'warned'
      readonly message: string
    }
  | {
      /**
       * `durability`: fewer replicas than asked acknowledged a call within `timeoutMs` (Redis
       * WAIT): a claim, a start, a completion, a failure mark, a release, or the record a replay
       * or an inspect would answer from. With `onShortfall: 'fail'` the call answered unavailable.
       */
      readonly type: 'durability-shortfall'
      readonly call: 'claim' | 'start' | 'complete' | 'markFailed' | 'release' | 'replay' | 'inspect'
      readonly replicas: number
      readonly acknowledged: number
      readonly action: 'failed' | 'warned'
      readonly message: string
    }
  | {
      /**
       * Redis refused FUNCTION or FCALL (an ACL user without them, a proxy or managed Redis that
       * disables them): the store sends its operations as EVALSHA scripts from now on, once per
       * store (docs/design.md §6, "Redis Functions").
       */
      readonly type: 'scripts-instead-of-functions'
      /** Redis's refusal. */
      readonly reason: string
      readonly message: string
    }

/** Parses the reply of `INFO` into the fields the store looks at. */
export function parseInfo(node: string, info: string): RedisServerReport {
  const fields = new Map<string, string>()
  let keys = 0
  for (const line of info.split(/\r?\n/)) {
    const colon = line.indexOf(':')
    if (colon <= 0 || line.startsWith('#')) continue
    const name = line.slice(0, colon)
    const value = line.slice(colon + 1)
    fields.set(name, value)
    if (/^db\d+$/.test(name)) keys += Number(/(?:^|,)keys=(\d+)/.exec(value)?.[1] ?? 0)
  }
  return {
    node,
    runId: fields.get('run_id') ?? '',
    maxmemoryPolicy: fields.get('maxmemory_policy') ?? 'unknown',
    aofEnabled: fields.get('aof_enabled') === '1',
    keys,
    version: fields.get('redis_version') ?? 'unknown',
    replicas: Number(fields.get('connected_slaves') ?? 0),
  }
}

/**
 * Whether the client's connection is on the database it asked for (`db`, or the URL's
 * `/<n>`). ioredis reports a `SELECT` the server refuses (`ERR DB index is out of range`:
 * the server has fewer `databases`) as an `error` event and then goes on, ready, in database 0,
 * where the store would read and write another database's keys. Read with `CLIENT INFO`
 * (Redis 6.2 and later); a server that refuses it is not judged.
 * @returns the error to refuse with, or `undefined` when the database is the one asked for.
 */
export async function databaseRefusal(client: Redis): Promise<IdempotencyError | undefined> {
  const wanted = Number(client.options.db ?? 0)
  let info: unknown
  try {
    info = await client.call('CLIENT', 'INFO')
  } catch (error) {
    if (isReplyError(error)) return undefined
    throw error
  }
  const on = /(?:^|\s)db=(\d+)/.exec(String(info))?.[1]
  if (on === undefined || Number(on) === wanted) return undefined
  return new IdempotencyError(
    ErrorCode.STORE_MISCONFIGURED,
    `The Redis client asks for database ${wanted}, but its connection at ${nodeName(client)} is on database ${on}: ` +
      `the server refused SELECT ${wanted} (it has fewer databases; see its "databases" setting). ` +
      "Fix the database number (the URL's /<n>, or the db option), or raise the server's databases.",
  )
}

/** The name a client's server is tracked under. */
export function nodeName(client: Redis): string {
  const options = client.options
  if (options.sentinels !== undefined && options.sentinels !== null && options.name) return `sentinel:${options.name}`
  return `${options.host ?? '127.0.0.1'}:${options.port ?? 6379}`
}

function isReplyError(error: unknown): boolean {
  return error instanceof Error && error.name === 'ReplyError'
}

type Listener = (node: Redis) => void

/**
 * Watches the servers behind one client: checks each on connect and on `checkAll()`, remembers
 * `run_id`s, and keeps the refusal that an unsafe eviction policy causes under `refuse`.
 */
export class ServerWatch {
  readonly #client: Redis | Cluster
  readonly #mode: UnsafeEviction
  readonly #emit: (event: RedisStoreEvent) => void
  readonly #runIds = new Map<string, string>()
  /** Node → the refusal its last check found (absent when the node is fine). */
  readonly #refusals = new Map<string, IdempotencyError>()
  /** Node → the policy last reported, so one policy is reported once, not on every reconnect. */
  readonly #reported = new Map<string, string>()
  readonly #listeners: Array<[Redis | Cluster, string, Listener]> = []
  #checked = false
  #inFlight: Promise<readonly RedisServerReport[]> | undefined

  constructor(client: Redis | Cluster, mode: UnsafeEviction, emit: (event: RedisStoreEvent) => void) {
    this.#client = client
    this.#mode = mode
    this.#emit = emit
    if (client.isCluster) {
      const cluster = client as Cluster
      this.#on(cluster, 'ready', () => void this.#background())
      this.#on(cluster, '+node', (node: Redis) => {
        if (node.options.readOnly === true) return
        this.#on(node, 'ready', () => void this.#checkNode(node).catch(() => undefined))
      })
      this.#on(cluster, '-node', (node: Redis) => this.#forget(node))
    } else {
      this.#on(client, 'ready', () => void this.#background())
    }
    if (client.status === 'ready') void this.#background()
  }

  /** The refusal to throw, when a server's policy is unsafe under `refuse`. */
  get refusal(): IdempotencyError | undefined {
    for (const refusal of this.#refusals.values()) return refusal
    return undefined
  }

  /**
   * Before the first claim: waits for the first check when the client is connected, so the
   * first request already honours the eviction policy. Never throws.
   */
  async ready(): Promise<void> {
    if (this.isReady) return
    await (this.#inFlight ?? this.#background())
  }

  /** True when `ready()` has nothing to wait for (checked already, or not connected). */
  get isReady(): boolean {
    return this.#checked || this.#client.status !== 'ready'
  }

  /** Checks every server now. Throws transport errors; never throws for an unsafe policy. */
  async checkAll(): Promise<readonly RedisServerReport[]> {
    const nodes = this.#client.isCluster ? (this.#client as Cluster).nodes('master') : [this.#client as Redis]
    const reports = await Promise.all(nodes.map((node) => this.#checkNode(node)))
    this.#checked = true
    return reports
  }

  /** Stops listening to the client (it outlives the store). */
  close(): void {
    for (const [emitter, event, listener] of this.#listeners) emitter.off(event, listener)
    this.#listeners.length = 0
  }

  /** Drops the listeners on a Cluster node that left the pool. */
  #forget(node: Redis): void {
    for (let i = this.#listeners.length - 1; i >= 0; i--) {
      const [emitter, event, listener] = this.#listeners[i] as [Redis | Cluster, string, Listener]
      if (emitter !== node) continue
      emitter.off(event, listener)
      this.#listeners.splice(i, 1)
    }
  }

  #background(): Promise<readonly RedisServerReport[]> {
    const run = this.checkAll()
      .catch(() => [] as readonly RedisServerReport[])
      .finally(() => {
        if (this.#inFlight === run) this.#inFlight = undefined
      })
    this.#inFlight = run
    return run
  }

  async #checkNode(client: Redis): Promise<RedisServerReport> {
    const node = nodeName(client)
    let report: RedisServerReport
    try {
      report = parseInfo(node, await client.info())
    } catch (error) {
      // INFO refused (ACL, renamed command): the policy cannot be known, which is not "safe".
      if (!isReplyError(error)) throw error
      report = {
        node,
        runId: '',
        maxmemoryPolicy: 'unknown',
        aofEnabled: false,
        keys: 0,
        version: 'unknown',
        replicas: 0,
      }
    }
    this.#noteRunId(report)
    this.#notePolicy(report)
    const wrongDatabase = await databaseRefusal(client)
    if (wrongDatabase === undefined) this.#refusals.delete(`${node} database`)
    else this.#refusals.set(`${node} database`, wrongDatabase)
    return report
  }

  #noteRunId(report: RedisServerReport): void {
    if (report.runId === '') return
    const previous = this.#runIds.get(report.node)
    this.#runIds.set(report.node, report.runId)
    if (previous === undefined || previous === report.runId) return
    const lost = report.aofEnabled
      ? 'with the append-only file on, records written in the last fsync interval before it stopped may be lost'
      : 'without an append-only file, records written since its last snapshot (or all of them) are lost'
    this.#emit({
      type: 'redis-restarted',
      node: report.node,
      previousRunId: previous,
      runId: report.runId,
      aofEnabled: report.aofEnabled,
      keys: report.keys,
      message:
        `Redis at ${report.node} restarted or failed over (run_id ${previous} -> ${report.runId}, ${report.keys} keys now): ` +
        `${lost}; a retry of a lost key runs its handler again.`,
    })
  }

  #notePolicy(report: RedisServerReport): void {
    const { node, maxmemoryPolicy: policy } = report
    if (policy === SAFE_EVICTION_POLICY) {
      this.#refusals.delete(node)
      this.#reported.delete(node)
      return
    }
    const why =
      policy === 'unknown'
        ? `its maxmemory-policy cannot be read (INFO was refused)`
        : `its maxmemory-policy is ${policy}, which may evict records before their TTL (every record has one)`
    if (this.#mode === UnsafeEviction.REFUSE) {
      this.#refusals.set(
        node,
        new IdempotencyError(
          ErrorCode.STORE_MISCONFIGURED,
          `The Redis store refuses to run on ${node}: ${why}. Set maxmemory-policy to noeviction, or pass unsafeEviction: 'warn' to run anyway.`,
        ),
      )
    }
    if (this.#reported.get(node) === policy) return
    this.#reported.set(node, policy)
    const refused = this.#mode === UnsafeEviction.REFUSE
    this.#emit({
      type: 'unsafe-eviction-policy',
      node,
      policy,
      action: refused ? 'refused' : 'warned',
      message: refused
        ? `The Redis store refuses every claim on ${node}: ${why}. Set maxmemory-policy to noeviction.`
        : `Redis at ${node} may lose idempotency records: ${why}. Running anyway (unsafeEviction: 'warn').`,
    })
  }

  #on(emitter: Redis | Cluster, event: string, listener: Listener): void {
    emitter.on(event, listener)
    this.#listeners.push([emitter, event, listener])
  }
}

/** The default `onEvent`: a Node.js process warning, which Node prints to stderr. */
export function emitProcessWarning(event: RedisStoreEvent): void {
  process.emitWarning(event.message, {
    type: 'IdempotencyWarning',
    code:
      event.type === 'redis-restarted'
        ? 'IDEMKIT_REDIS_RESTARTED'
        : event.type === 'scripts-instead-of-functions'
          ? 'IDEMKIT_REDIS_SCRIPTS'
          : 'IDEMKIT_UNSAFE_EVICTION',
  })
}
