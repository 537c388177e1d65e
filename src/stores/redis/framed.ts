/**
 * A command whose arguments include bytes (the record a claim's `SET` writes, the response a
 * completion stores), written as one RESP frame in one allocation (docs/design.md §6, "Commands
 * with bytes"). ioredis writes such a command through a list of pieces, measuring and
 * copying each one (its "mixed buffers"), at about twice the CPU of the same command with text
 * arguments; this writes the same bytes in one pass. Everything else about the command is
 * ioredis's own: its promise and reply, the key prefix, the Cluster slot, the re-send after a
 * reconnect, `commandTimeout`. A client with `enableAutoPipelining` sends it as ioredis's own
 * command, so its pipelines see every call.
 */
import { createRequire } from 'node:module'
import type { Cluster, Command, Redis } from 'ioredis'

/** The constructor of an ioredis command written as one frame. */
type FramedCommandClass = new (...args: ConstructorParameters<typeof Command>) => Command

let framedCommand: FramedCommandClass | undefined

/**
 * An ioredis command written as one frame (see the module comment). ioredis is an optional peer
 * that only a Redis store needs, so its `Command` class is loaded here, at the first command
 * with bytes, never when a package entry is imported: an app on PostgreSQL or the memory store
 * runs without ioredis installed.
 */
export function framedCommandClass(): FramedCommandClass {
  if (framedCommand === undefined) {
    const { Command: IoredisCommand } = createRequire(import.meta.url)('ioredis') as typeof import('ioredis')
    framedCommand = class FramedCommand extends IoredisCommand {
      override toWritable(): Buffer {
        return respFrame(this.name, this.args as readonly (string | Buffer)[])
      }
    }
  }
  return framedCommand
}

/**
 * The RESP frame of `name args`: an array of bulk strings, byte for byte as ioredis writes it.
 * Text runs between the byte arguments are written as one string each.
 */
export function respFrame(name: string, args: readonly (string | Buffer)[]): Buffer {
  // Text runs and byte arguments in order, and the frame's size, counted as they are built: the
  // RESP markup is ASCII, so only the text arguments need their UTF-8 length measured.
  const parts: (string | Buffer)[] = []
  const nameBytes = Buffer.byteLength(name)
  let text = `*${args.length + 1}\r\n$${nameBytes}\r\n${name}\r\n`
  let size = text.length - name.length + nameBytes
  for (const arg of args) {
    if (typeof arg === 'string') {
      const bytes = Buffer.byteLength(arg)
      const markup = `$${bytes}\r\n`
      text += `${markup}${arg}\r\n`
      size += markup.length + bytes + 2
    } else {
      const markup = `$${arg.length}\r\n`
      parts.push(text + markup, arg)
      size += markup.length + arg.length + 2
      text = '\r\n'
    }
  }
  parts.push(text)
  const frame = Buffer.allocUnsafe(size)
  let offset = 0
  for (const part of parts) {
    if (typeof part === 'string') {
      offset += frame.write(part, offset)
    } else {
      frame.set(part, offset)
      offset += part.length
    }
  }
  return frame
}

/** The client options this reads: ioredis's own, as `call` reads them. */
interface SenderOptions {
  readonly keyPrefix?: string
  readonly showFriendlyErrorStack?: boolean
  readonly enableAutoPipelining?: boolean
}

/**
 * Sends `name args` on `redis`, its bulk replies as Buffers (`bytes`) or text; as one frame
 * when an argument is bytes, else through the client's own method of the command (`set` /
 * `setBuffer`, `fcall` / `fcallBuffer`). Not `callBuffer`: with `enableAutoPipelining`, ioredis
 * 5 queues a `callBuffer` without its command's name.
 */
export function sendCommand(
  redis: Redis | Cluster,
  name: string,
  args: (string | Uint8Array)[],
  bytes: boolean,
): Promise<unknown> {
  const options = redis.options as SenderOptions
  if (options.enableAutoPipelining === true || !args.some((arg) => typeof arg !== 'string')) {
    const method = (redis as unknown as Record<string, (...values: (string | Uint8Array)[]) => Promise<unknown>>)[
      bytes ? `${name}Buffer` : name
    ] as (...values: (string | Uint8Array)[]) => Promise<unknown>
    return method.apply(redis, args)
  }
  const FramedCommand = framedCommandClass()
  const command = new FramedCommand(name, args as (string | Buffer)[], {
    keyPrefix: options.keyPrefix,
    replyEncoding: bytes ? null : 'utf8',
    errorStack: options.showFriendlyErrorStack === true ? new Error() : undefined,
  })
  return redis.sendCommand(command) as Promise<unknown>
}
