/**
 * MONITOR on a connection of its own, read from a plain socket. ioredis's `monitor()` marks its
 * connection as monitoring only a tick after MONITOR's OK; a line that comes in the same read
 * as the OK (another client's command, on a busy server) then finds no command waiting for it
 * and the client fails with "Command queue state error". Here the OK is read like any other
 * line, so nothing that comes after it can be lost or misread.
 */
import { EventEmitter } from 'node:events'
import { connect, type Socket } from 'node:net'

/** One command Redis ran, as MONITOR printed it. */
export interface MonitoredCommand {
  /** Redis's clock when it ran, as printed ("seconds.micros"). */
  readonly time: string
  /** The command and its arguments. */
  readonly args: string[]
  /** Who sent it: "ip:port" of a client, or "lua" inside a script. */
  readonly source: string
}

/** The monitoring connection: emits `monitor` (time, args, source) for each command. */
export class RedisMonitor extends EventEmitter<{ monitor: [time: string, args: string[], source: string] }> {
  constructor(private readonly socket: Socket) {
    super()
  }

  /** Closes the connection at once. */
  disconnect(): void {
    this.socket.destroy()
  }
}

/**
 * Opens a MONITOR connection to Redis on 127.0.0.1:`port` (or a `redis://host:port` URL) and
 * resolves once Redis has answered OK: every command run after that is reported, in order.
 */
export function redisMonitor(target: number | string): Promise<RedisMonitor> {
  const { host, port } = typeof target === 'number' ? { host: '127.0.0.1', port: target } : hostAndPort(target)
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port })
    const monitor = new RedisMonitor(socket)
    let buffered = ''
    let started = false
    const fail = (error: Error) => {
      socket.destroy()
      if (!started) reject(error)
    }
    socket.setEncoding('latin1')
    socket.once('error', fail)
    socket.once('connect', () => socket.write('MONITOR\r\n'))
    socket.on('data', (chunk: string) => {
      buffered += chunk
      for (let end = buffered.indexOf('\r\n'); end >= 0; end = buffered.indexOf('\r\n')) {
        const line = buffered.slice(0, end)
        buffered = buffered.slice(end + 2)
        if (!started) {
          if (line !== '+OK') return fail(new Error(`MONITOR was refused: ${line}`))
          started = true
          resolve(monitor)
          continue
        }
        const command = parseMonitorLine(line)
        if (command !== undefined) monitor.emit('monitor', command.time, command.args, command.source)
      }
    })
  })
}

function hostAndPort(url: string): { host: string; port: number } {
  const parsed = new URL(url)
  return { host: parsed.hostname || '127.0.0.1', port: Number(parsed.port || 6379) }
}

/**
 * One MONITOR line: `+1339518083.107412 [0 127.0.0.1:60866] "set" "k" "v"`. Redis quotes each
 * argument and escapes `\\`, `\"`, `\n`, `\r`, `\t`, `\a`, `\b` and other bytes as `\xHH`.
 * Valkey 8.1.0 and 8.1.1 print `"` and `\` inside an argument unescaped (valkey-io/valkey#2035,
 * fixed in 8.1.2), so a quote ends an argument only where the line ends or the next argument
 * begins after it: the one reading that holds on both.
 */
export function parseMonitorLine(line: string): MonitoredCommand | undefined {
  const match = /^\+(\S+) \[\d+ ([^\]]+)\] (.*)$/.exec(line)
  if (match === null) return undefined
  const [, time, source, rest] = match as unknown as [string, string, string, string]
  const args: string[] = []
  let i = 0
  while (i < rest.length) {
    if (rest[i] === ' ') {
      i++
      continue
    }
    if (rest[i] !== '"') return undefined
    let arg = ''
    i++
    while (i < rest.length) {
      const c = rest[i] as string
      if (c === '"' && (i + 1 === rest.length || rest.startsWith(' "', i + 1))) break
      if (c !== '\\') {
        arg += c
        i++
        continue
      }
      const next = rest[i + 1]
      if (next === 'x') {
        arg += String.fromCharCode(Number.parseInt(rest.slice(i + 2, i + 4), 16))
        i += 4
        continue
      }
      arg += ESCAPES[next as string] ?? next
      i += 2
    }
    args.push(arg)
    i++
  }
  return { time, args, source }
}

const ESCAPES: Record<string, string> = { n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b' }
