/**
 * The Redis store tests' one set-up: the suite's redis-server (test/setup/redis.ts) or one of the
 * block's own (started before its tests, stopped by PID after them), an admin client, the data
 * flushed before each test if asked, and clients the tests own, disconnected when done: a client
 * made in a test (or a `beforeEach`) after that test, one made in a `beforeAll` after the block.
 * Call it at the top of a file or inside a describe, before the block's own hooks: its
 * `beforeAll` and `beforeEach` run before theirs, its `afterEach` and `afterAll` after theirs.
 *
 *   const server = redisFixture({ flush: 'data' })
 *   it('...', async () => { const store = redisStore({ redis: await server.ready() }) ... })
 */
import { Redis, type RedisOptions } from 'ioredis'
import { afterAll, afterEach, beforeAll, beforeEach, inject } from 'vitest'
import { type RedisServer, type RedisServerOptions, startRedisServer } from '../../../scripts/redis-server.js'
import { sleep } from '../../helpers/sleep.js'

export interface RedisFixtureOptions {
  /**
   * A redis-server of the block's own, started with these options (or those the function
   * returns, called when the block starts); the suite's shared server when omitted.
   */
  readonly server?: RedisServerOptions | (() => RedisServerOptions)
  /** What is flushed before each test: nothing (the default), the data, or the data and the scripts. */
  readonly flush?: 'none' | 'data' | 'data-and-scripts'
  /** The admin client's options (it connects before the first test). */
  readonly admin?: RedisOptions
  /** How long the block's start may take (its own server, the admin's connection); vitest's hookTimeout when omitted. */
  readonly startTimeoutMs?: number
}

export interface RedisFixture {
  /** The server's URL. */
  readonly url: string
  /** The server's port on 127.0.0.1. */
  readonly port: number
  /** The block's own server (not there on the suite's shared server). */
  readonly server: RedisServer
  /** The admin client: connected before the first test, disconnected after the last. */
  readonly admin: Redis
  /**
   * A client the test owns, to this server or to `port` on 127.0.0.1: calls time out after 2 s,
   * one retry, connection errors not reported (the tests look at the calls); dropped when the
   * test ends (made in a `beforeAll`: when the block ends).
   */
  client(options?: RedisOptions, port?: number): Redis
  /** A client made otherwise, dropped as `client()`'s are. */
  adopt<T extends Redis>(redis: T): T
  /** `client()`, connected (one PING answered). */
  ready(options?: RedisOptions): Promise<Redis>
  /** Stops the block's own server and starts it again on the same port with `options`. */
  restart(options?: RedisServerOptions): Promise<void>
}

/** A client's default options: bounded calls, one retry. */
const BOUNDED: RedisOptions = { commandTimeout: 2_000, maxRetriesPerRequest: 1 }

/** Registers the hooks of one Redis set-up around the current block's tests; see the header. */
export function redisFixture(options: RedisFixtureOptions = {}): RedisFixture {
  let server: RedisServer | undefined
  let url: string | undefined
  let admin: Redis | undefined
  /** The clients of the running test, and those of the block (made in a `beforeAll`). */
  const owned = { test: [] as Redis[], block: [] as Redis[] }
  let inTest = false

  const drop = async (clients: Redis[]): Promise<void> => {
    // Quit what is connected (for at most a second: a paused server answers nothing); a client
    // that never connected (a closed port) can only be dropped.
    await Promise.all(
      clients.splice(0).map(async (redis) => {
        if (redis.status === 'ready') await Promise.race([redis.quit().catch(() => undefined), sleep(1_000)])
        redis.disconnect()
      }),
    )
  }
  const serverOptions = (): RedisServerOptions =>
    typeof options.server === 'function' ? options.server() : (options.server ?? {})

  beforeAll(async () => {
    if (options.server !== undefined) {
      server = await startRedisServer(serverOptions())
      url = server.url
    } else {
      url = inject('redisUrl')
    }
    admin = new Redis(url, options.admin ?? {})
    admin.on('error', () => undefined)
    await admin.ping()
  }, options.startTimeoutMs)

  beforeEach(async () => {
    inTest = true
    if (options.flush === undefined || options.flush === 'none') return
    await fixture.admin.flushall()
    if (options.flush === 'data-and-scripts') await fixture.admin.script('FLUSH')
  })

  afterEach(async () => {
    inTest = false
    await drop(owned.test)
  })

  afterAll(async () => {
    await drop(owned.block)
    admin?.disconnect()
    await server?.stop()
  })

  const fixture: RedisFixture = {
    get url() {
      if (url === undefined) throw new Error('the Redis fixture has not started: use it inside a test or a hook')
      return url
    },
    get port() {
      return Number(new URL(fixture.url).port)
    },
    get server() {
      if (server === undefined) throw new Error('the Redis fixture runs on the suite’s server: ask for { server: {} }')
      return server
    },
    get admin() {
      if (admin === undefined) throw new Error('the Redis fixture has not started: use it inside a test or a hook')
      return admin
    },
    client(clientOptions: RedisOptions = {}, port?: number) {
      const redis =
        port === undefined
          ? new Redis(fixture.url, { ...BOUNDED, ...clientOptions })
          : new Redis(port, '127.0.0.1', { ...BOUNDED, ...clientOptions })
      redis.on('error', () => undefined)
      return fixture.adopt(redis)
    },
    adopt(redis) {
      ;(inTest ? owned.test : owned.block).push(redis)
      return redis
    },
    async ready(clientOptions: RedisOptions = {}) {
      const redis = fixture.client(clientOptions)
      await redis.ping()
      return redis
    },
    async restart(restartOptions: RedisServerOptions = serverOptions()) {
      const { port } = fixture.server
      await fixture.server.stop()
      server = await startRedisServer({ ...restartOptions, port })
      url = server.url
    },
  }
  return fixture
}
