/**
 * How the Redis store sends its operations (docs/design.md §6, "Redis Functions"): as FCALL of
 * one functions library, loaded on demand, or, where Redis refuses FUNCTION or FCALL, as
 * today's EVALSHA scripts. Decided once per store: the first refusal switches it to scripts
 * for good.
 */
import type { Cluster, Redis } from 'ioredis'
import { sendCommand } from './framed.js'
import type { FunctionLibrary, LoadedScript, ScriptName } from './script-loader.js'

/** One operation's call: the key, then its arguments. */
export type ScriptCommand = (key: string, ...args: (string | Uint8Array)[]) => Promise<unknown>

/** How the store's operations are sent, for `describe()`. */
export interface ScriptMode {
  /** `functions`: FCALL of `library`; `scripts`: EVALSHA, with ioredis's EVAL on NOSCRIPT. */
  readonly mode: 'functions' | 'scripts'
  readonly library: string
  /** Why the store uses scripts: Redis's refusal of FUNCTION LOAD or FCALL, or the option. */
  readonly reason?: string
}

/** FCALL of a function the node does not have: nothing ran. */
export function isFunctionNotFound(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('ERR Function not found')
}

/**
 * Redis (or a proxy in front of it) refuses FUNCTION or FCALL as such: an ACL user without them
 * (NOPERM naming `fcall` or `function`, not a command a function calls), a server or proxy that
 * has no such command or subcommand. Nothing ran.
 */
function isRefusal(error: unknown): boolean {
  if (!(error instanceof Error)) return false
  const message = error.message
  return (
    /^NOPERM\b.*'(fcall|function)[|']/i.test(message) ||
    /^ERR (unknown (sub)?command|unsupported command|command not supported)\b/i.test(message)
  )
}

/**
 * How many times one call loads the library and is sent again after "Function not found"
 * (a FUNCTION FLUSH can land between the load and the re-send): each re-send is safe, the
 * call it repeats did not run.
 */
const MAX_RELOADS = 3

function isOom(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('OOM')
}

export class ScriptCalls {
  readonly #redis: Redis | Cluster
  readonly #library: FunctionLibrary
  readonly #onScripts: (reason: string) => void
  #mode: 'functions' | 'scripts' = 'functions'
  #reason: string | undefined
  /** The FUNCTION LOAD in flight, so that calls meeting "Function not found" at once load once. */
  #loading: Promise<boolean> | undefined

  /**
   * @param functions false: scripts from the start (the store's `functions` option).
   * @param onScripts told once, with Redis's refusal, when the store turns to scripts.
   */
  constructor(
    redis: Redis | Cluster,
    library: FunctionLibrary,
    functions: boolean,
    onScripts: (reason: string) => void,
  ) {
    this.#redis = redis
    this.#library = library
    if (!functions) {
      this.#mode = 'scripts'
      this.#reason = 'the functions option is false'
    }
    this.#onScripts = onScripts
  }

  get library(): FunctionLibrary {
    return this.#library
  }

  /** True while the store sends FCALL. */
  get functions(): boolean {
    return this.#mode === 'functions'
  }

  report(): ScriptMode {
    return this.#reason === undefined
      ? { mode: this.#mode, library: this.#library.name }
      : { mode: this.#mode, library: this.#library.name, reason: this.#reason }
  }

  /**
   * The operation `name`: FCALL of its function; on "Function not found" (FUNCTION FLUSH, a new
   * master or Cluster node without the library) the library is loaded and the call sent again
   * (it did not run), at most `MAX_RELOADS` times; on a refusal of FUNCTION or FCALL, the store turns to scripts and the
   * call goes as `script`.
   * @param bytes bulk replies as Buffers (a stored response).
   */
  command(name: ScriptName, script: LoadedScript, bytes = false): ScriptCommand {
    const redis = this.#redis
    const viaScript = define(redis, script, bytes)
    const fn = this.#library.functions[name]
    const oomAsScript = this.#library.oomAsScript.has(name)
    // FCALL <function> 1 <key> <args>: the function and the key count ahead of the arguments.
    const send = (args: (string | Uint8Array)[]) => sendCommand(redis, 'fcall', args, bytes)
    return (key, ...rest) => {
      if (this.#mode === 'scripts') return viaScript(key, ...rest)
      const args = [fn, '1', key, ...rest]
      const recover = (error: unknown, reloads: number): Promise<unknown> => {
        if (isFunctionNotFound(error) && reloads > 0 && reloads < MAX_RELOADS && !redis.isCluster) {
          // Again: a FUNCTION FLUSH came between the load and the re-send. This time the load
          // and the call go out together on one connection, which Redis runs back to back.
          const loading = loadOn(redis as Redis, this.#library)
          const sent = send(args)
          return Promise.allSettled([loading, sent]).then(([load, call]) => {
            if (call.status === 'fulfilled') return call.value
            if (load.status === 'rejected' && isRefusal(load.reason)) {
              this.#turnToScripts(load.reason as Error)
              return viaScript(key, ...rest)
            }
            if (load.status === 'rejected' && isOom(load.reason)) return viaScript(key, ...rest)
            return recover(call.reason, reloads + 1)
          })
        }
        if (isFunctionNotFound(error) && reloads < MAX_RELOADS) {
          // The first time, one load for every call that met "Function not found" at once.
          return this.load().then(
            (loaded) =>
              loaded ? send(args).catch((again: unknown) => recover(again, reloads + 1)) : viaScript(key, ...rest),
            // FUNCTION LOAD is refused at maxmemory, where a script of allow-oom still runs.
            (loadError: unknown) => {
              if (isOom(loadError)) return viaScript(key, ...rest)
              throw loadError
            },
          )
        }
        if (isRefusal(error)) {
          this.#turnToScripts(error as Error)
          return viaScript(key, ...rest)
        }
        // A function without allow-oom is refused at maxmemory before it runs; its script
        // would run until it writes (see FunctionLibrary.oomAsScript).
        if (oomAsScript && isOom(error)) return viaScript(key, ...rest)
        throw error
      }
      return send(args).catch((error: unknown) => recover(error, 0))
    }
  }

  /**
   * Loads the library (FUNCTION LOAD, never REPLACE: a library of that name is this very
   * source, so "already exists" counts as loaded) on the server, or on every master of a
   * Cluster. Resolves to false when Redis refuses FUNCTION: the store then uses scripts.
   * Rejects with Redis's error otherwise (nothing ran).
   */
  load(): Promise<boolean> {
    if (this.#mode === 'scripts') return Promise.resolve(false)
    this.#loading ??= this.#loadEverywhere().finally(() => {
      this.#loading = undefined
    })
    return this.#loading
  }

  async #loadEverywhere(): Promise<boolean> {
    const client = this.#redis
    const nodes = client.isCluster ? (client as Cluster).nodes('master') : [client as Redis]
    const results = await Promise.allSettled(nodes.map((node) => loadOn(node, this.#library)))
    for (const result of results) {
      if (result.status === 'rejected' && isRefusal(result.reason)) {
        this.#turnToScripts(result.reason as Error)
        return false
      }
    }
    for (const result of results) if (result.status === 'rejected') throw result.reason
    return true
  }

  /**
   * The first refusal of FUNCTION or FCALL, seen on a call that did not run: scripts from now on.
   * Another store on the same server that may use FUNCTION keeps its own choice.
   */
  #turnToScripts(error: Error): void {
    if (this.#mode === 'scripts') return
    this.#mode = 'scripts'
    this.#reason = `Redis refused FUNCTION or FCALL: ${error.message}`
    this.#onScripts(error.message)
  }

  /**
   * Seen by the durable touch (sent by hand, see `#sendTouch` in replication.ts): a refusal of FCALL or
   * FUNCTION there turns the store to scripts too.
   */
  refused(error: unknown): boolean {
    if (!isRefusal(error)) return false
    this.#turnToScripts(error as Error)
    return true
  }
}

/** FUNCTION LOAD of `library` on `node`; "already exists" is the same library, loaded. */
export function loadOn(node: Redis, library: FunctionLibrary): Promise<void> {
  return node.call('function', 'load', library.source).then(
    () => undefined,
    (error: unknown) => {
      if (error instanceof Error && error.message.includes(`'${library.name}' already exists`)) return
      throw error
    },
  )
}

/**
 * Defines `script` on the client under its versioned name unless that name is already defined
 * there (another store on the same client), and returns it bound to the client, so a call is
 * one property-free function call.
 */
function define(redis: Redis | Cluster, script: LoadedScript, bytes = false): ScriptCommand {
  const commands = redis as unknown as Record<string, ScriptCommand | undefined>
  if (typeof commands[script.commandName] !== 'function') {
    redis.defineCommand(script.commandName, { numberOfKeys: 1, lua: script.lua })
  }
  // ioredis defines `<name>Buffer` beside `<name>`: the same script, its bulk replies as Buffers.
  const command = commands[bytes ? `${script.commandName}Buffer` : script.commandName] as ScriptCommand
  return command.bind(redis)
}
