/**
 * The fault harness itself: the TCP proxy's modes do what the fault tests rely on, and a
 * paused, killed and restarted redis-server behaves as they assume.
 */
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type FaultRedis, startFaultRedis } from '../helpers/fault-redis.js'
import { sleep } from '../helpers/sleep.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'

describe('fault harness', () => {
  let redis: FaultRedis
  let admin: Redis
  let proxy: TcpProxy
  const clients: Redis[] = []

  const through = () => {
    const client = new Redis(proxy.port, '127.0.0.1', {
      commandTimeout: 300,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      retryStrategy: () => 20,
    })
    client.on('error', () => {})
    clients.push(client)
    return client
  }

  beforeAll(async () => {
    redis = await startFaultRedis()
    admin = redis.admin()
    proxy = await startTcpProxy(redis.port)
  })

  afterAll(async () => {
    for (const client of clients) client.disconnect()
    await proxy.close()
    await redis.stop()
  })

  it('passes commands and replies in pass mode and holds them back in delay mode', async () => {
    const client = through()
    await client.set('h:pass', '1')
    proxy.setMode('delay', { delayMs: 50 })

    const value = await client.get('h:pass')
    proxy.setMode('pass')

    expect(value).toBe('1')
    expect(await admin.get('h:pass')).toBe('1')
  })

  it('keeps the order of the bytes when a delay ends: no command overtakes one held back, no reply goes to another', async () => {
    const client = new Redis(proxy.port, '127.0.0.1', { commandTimeout: 5_000, maxRetriesPerRequest: 0 })
    client.on('error', () => {})
    clients.push(client)
    await admin.mset('h:order:a', 'a', 'h:order:b', 'b')
    await client.ping()
    const delayMs = 400
    proxy.setMode('delay', { delayMs })
    const sentAt = Date.now()
    const first = client.get('h:order:a')
    await sleep(100)

    // In one turn of the event loop: the delay ends, the held command falls due (its timer has
    // not run yet, as on a loaded machine) and the next command is sent.
    const second = await new Promise<Promise<string | null>>((resolve) =>
      setTimeout(() => {
        proxy.setMode('pass')
        while (Date.now() < sentAt + delayMs + 100) {
          // busy: the proxy's timer for the held command waits behind this turn
        }
        resolve(client.get('h:order:b'))
      }, 0),
    )

    expect(await Promise.all([first, second])).toEqual(['a', 'b'])
  })

  it('never delivers a command in blackhole mode, and resets the connection when the mode ends', async () => {
    const client = through()
    await client.ping()
    proxy.setMode('blackhole')

    const error = await client.set('h:blackhole', '1').catch((e: Error) => e)
    proxy.setMode('pass')

    expect((error as Error).message).toBe('Command timed out')
    expect(await admin.exists('h:blackhole')).toBe(0)
    expect(proxy.stats.resets).toBeGreaterThan(0)
  })

  it('delivers the command but loses its reply in drop-replies mode', async () => {
    const client = through()
    await client.ping()
    proxy.setMode('drop-replies')

    const error = await client.set('h:dropped', '1').catch((e: Error) => e)
    proxy.setMode('pass')

    expect((error as Error).message).toBe('Command timed out')
    expect(await admin.get('h:dropped')).toBe('1')
  })

  it('resets every connection in cut mode', async () => {
    const client = through()
    await client.ping()
    const closed = new Promise((resolve) => client.once('close', resolve))

    proxy.setMode('cut')
    await closed
    proxy.setMode('pass')

    expect(client.status).not.toBe('ready')
  })

  it('pauses, resumes, kills and restarts the server by PID', async () => {
    const before = redis.pid()
    const client = through()
    await client.ping()

    redis.pause()
    const paused = await client.ping().catch((e: Error) => e.message)
    redis.resume()
    await redis.restart()
    const fresh = new Redis(redis.port, '127.0.0.1')

    expect(paused).toBe('Command timed out')
    expect(redis.pid()).not.toBe(before)
    expect(await fresh.ping()).toBe('PONG')
    fresh.disconnect()
  })
})
