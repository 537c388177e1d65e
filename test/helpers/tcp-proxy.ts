/**
 * A TCP proxy between an app and Redis on 127.0.0.1, with fault modes switched at run time:
 * - `pass`: bytes flow both ways;
 * - `delay`: both directions are held back by `delayMs`; the bytes of each direction keep
 *   their order, also across the end of a delay (a chunk sent after it waits behind those held);
 * - `blackhole`: what the client sends never reaches Redis (the command is not applied);
 * - `drop-replies`: commands reach Redis (they are applied), its replies are lost;
 * - `cut`: every connection is reset, and new ones are reset as soon as they are accepted;
 * - and, whatever the mode, `dropRepliesAfter(pattern)`: the next bytes a client sends that
 *   contain `pattern` reach the server (they are applied), and that connection's replies from
 *   then on are lost; it is reset shortly after (a reply lost after, say, a COMMIT).
 * A connection that lost bytes in either direction is out of step (its client waits for
 * replies that will never come), as after a real partition: it loses everything from then on
 * and is reset when the mode changes, so no reply is ever delivered to the wrong command.
 */
import { connect, createServer, type Server, type Socket } from 'node:net'
import { sleep } from './sleep.js'

export type ProxyMode = 'pass' | 'delay' | 'blackhole' | 'drop-replies' | 'cut'

export interface ProxyStats {
  connections: number
  /** Client → Redis bytes forwarded and dropped. */
  sent: number
  blackholed: number
  /** Redis → client bytes forwarded and dropped. */
  replied: number
  dropped: number
  resets: number
}

interface Pair {
  readonly client: Socket
  readonly upstream: Socket
  tainted: boolean
  /** Replies are dropped on this connection (`dropRepliesAfter`). */
  deaf: boolean
  /**
   * The chunks held back in each direction, in the order they came, each with the time it is
   * due; while one is held, every later chunk of that direction queues behind it, whatever the
   * mode, so no byte overtakes another (as on a real connection).
   */
  readonly heldUp: Held[]
  readonly heldDown: Held[]
}

interface Held {
  readonly chunk: Buffer
  readonly due: number
}

export interface TcpProxy {
  readonly port: number
  readonly url: string
  readonly stats: ProxyStats
  mode(): ProxyMode
  /** The connections open through it now. */
  open(): number
  /** Switches the mode; leaving a mode resets every connection that lost bytes in it. */
  setMode(mode: ProxyMode, options?: { delayMs?: number }): void
  /**
   * Once, on the next client bytes containing `pattern`: forwards them, drops every reply of
   * that connection from then on and resets it after `resetAfterMs`.
   */
  dropRepliesAfter(pattern: string | Buffer, resetAfterMs?: number): void
  /** Resolves once `predicate(stats)` holds, checking every 5 ms, for at most `timeoutMs`. */
  waitFor(predicate: (stats: ProxyStats) => boolean, timeoutMs?: number): Promise<void>
  close(): Promise<void>
}

/** Starts a proxy on a free 127.0.0.1 port in front of `targetPort`. */
export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const pairs = new Set<Pair>()
  const stats: ProxyStats = { connections: 0, sent: 0, blackholed: 0, replied: 0, dropped: 0, resets: 0 }
  let mode: ProxyMode = 'pass'
  let delayMs = 0
  let trigger: { pattern: Buffer; resetAfterMs: number } | undefined

  const reset = (pair: Pair) => {
    if (!pairs.delete(pair)) return
    stats.resets++
    pair.client.resetAndDestroy()
    pair.upstream.destroy()
  }

  const forward = (pair: Pair, chunk: Buffer, up: boolean) => {
    if (!up && pair.deaf) {
      stats.dropped += chunk.length
      return
    }
    if (up && trigger !== undefined && chunk.includes(trigger.pattern)) {
      const { resetAfterMs } = trigger
      trigger = undefined
      pair.deaf = true
      setTimeout(() => reset(pair), resetAfterMs)
    }
    const drop = pair.tainted || (up ? mode === 'blackhole' : mode === 'drop-replies') || mode === 'cut'
    if (drop) {
      pair.tainted = true
      if (up) stats.blackholed += chunk.length
      else stats.dropped += chunk.length
      return
    }
    const held = up ? pair.heldUp : pair.heldDown
    if (mode !== 'delay' && held.length === 0) {
      write(pair, chunk, up)
      return
    }
    // Behind what is held: a chunk whose time came while an earlier one still waits for its
    // timer (a late timer on a loaded machine, or a delay that just ended) must not overtake it.
    const last = held[held.length - 1]
    const due = Math.max(Date.now() + (mode === 'delay' ? delayMs : 0), last?.due ?? 0)
    held.push({ chunk, due })
    if (held.length === 1) setTimeout(() => release(pair, up), due - Date.now())
  }

  const write = (pair: Pair, chunk: Buffer, up: boolean) => {
    const target = up ? pair.upstream : pair.client
    if (!pairs.has(pair) || target.destroyed) return
    target.write(chunk)
    if (up) stats.sent += chunk.length
    else stats.replied += chunk.length
  }

  /** Writes the held chunks that are due, oldest first, and waits for the next one. */
  const release = (pair: Pair, up: boolean) => {
    const held = up ? pair.heldUp : pair.heldDown
    for (let next = held[0]; next !== undefined && next.due <= Date.now(); next = held[0]) {
      held.shift()
      write(pair, next.chunk, up)
    }
    const next = held[0]
    if (next !== undefined && pairs.has(pair)) setTimeout(() => release(pair, up), next.due - Date.now())
  }

  const server: Server = createServer((client) => {
    stats.connections++
    if (mode === 'cut') {
      stats.resets++
      client.resetAndDestroy()
      return
    }
    const upstream = connect({ port: targetPort, host: targetHost })
    const pair: Pair = { client, upstream, tainted: false, deaf: false, heldUp: [], heldDown: [] }
    pairs.add(pair)
    client.on('data', (chunk: Buffer) => forward(pair, chunk, true))
    upstream.on('data', (chunk: Buffer) => forward(pair, chunk, false))
    const end = () => {
      if (!pairs.delete(pair)) return
      client.destroy()
      upstream.destroy()
    }
    client.on('close', end)
    upstream.on('close', end)
    client.on('error', end)
    upstream.on('error', end)
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve())
  })
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0

  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    stats,
    mode: () => mode,
    open: () => pairs.size,
    setMode(next, options = {}) {
      mode = next
      delayMs = options.delayMs ?? 0
      for (const pair of [...pairs]) {
        if (next === 'cut' || pair.tainted) reset(pair)
      }
    },
    dropRepliesAfter(pattern, resetAfterMs = 200) {
      trigger = { pattern: Buffer.from(pattern), resetAfterMs }
    },
    async waitFor(predicate, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs
      while (!predicate(stats)) {
        if (Date.now() > deadline)
          throw new Error(`proxy: condition not met within ${timeoutMs} ms: ${JSON.stringify(stats)}`)
        await sleep(5)
      }
    },
    async close() {
      for (const pair of [...pairs]) reset(pair)
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
