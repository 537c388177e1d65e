/**
 * Loads the Redis store's Lua scripts: one `.lua` file per operation, shared helpers
 * from `lib/` inlined by a tiny include, each script named by its SHA-1 so that two
 * versions of the library never share a command name.
 */
import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ErrorCode, IdempotencyError } from '../../core/errors.js'

/**
 * The one directory the scripts are read from: `scripts/` next to this module. That is
 * `src/stores/redis/scripts` when running from source (vitest, tsx), and the same path under
 * `dist/` after the build, which copies the `.lua` files next to the compiled JavaScript.
 */
export const SCRIPTS_DIR: string = fileURLToPath(new URL('./scripts/', import.meta.url))

/** The operations, one `.lua` file each. */
export const SCRIPT_NAMES = [
  'claim',
  'inspect',
  'start',
  'complete',
  'mark-failed',
  'release',
  'renew',
  'replace',
  'touch',
  'compare-and-set',
] as const
export type ScriptName = (typeof SCRIPT_NAMES)[number]

/** One script, ready for `defineCommand`. */
export interface LoadedScript {
  readonly name: ScriptName
  /** The source with every include inlined. */
  readonly lua: string
  /** SHA-1 of `lua`, lowercase hex (what EVALSHA uses). */
  readonly sha1: string
  /** `idemkit_<name>_<first 12 hex of sha1>`: a new script version is a new command. */
  readonly commandName: string
}

/** `--- @include "lib/<name>"` on a line of its own (the `.lua` suffix is optional). */
const INCLUDE_LINE = /^\s*---\s*@include\b(.*)$/
const INCLUDE_TARGET = /^\s*"(lib\/[a-z0-9][a-z0-9-]*)(?:\.lua)?"\s*$/
/** Any KEYS[n] but KEYS[1]: every script touches exactly one key (docs/design.md §2, Redis Cluster). */
const OTHER_KEY = /KEYS\s*\[\s*(?!1\s*\])[^\]]*\]/

let cache: Readonly<Record<ScriptName, LoadedScript>> | undefined

/**
 * The store's scripts, read and resolved once per process (the result is cached).
 * @returns every script by name.
 * @throws IdempotencyError `ERR_IDEM_SCRIPT_LOAD` when a file is missing, an include cannot be
 *   resolved, or a script names a key other than KEYS[1].
 */
export function loadScripts(): Readonly<Record<ScriptName, LoadedScript>> {
  if (cache === undefined) {
    const scripts = {} as Record<ScriptName, LoadedScript>
    for (const name of SCRIPT_NAMES) {
      const lua = resolveScript(SCRIPTS_DIR, `${name}.lua`)
      const sha1 = createHash('sha1').update(lua).digest('hex')
      scripts[name] = Object.freeze({
        name,
        lua,
        sha1,
        commandName: `idemkit_${name.replaceAll('-', '_')}_${sha1.slice(0, 12)}`,
      })
    }
    cache = Object.freeze(scripts)
  }
  return cache
}

/**
 * Reads `file` (relative to `baseDir`) and inlines its includes, recursively. Each included file
 * is inlined once per script, where it is first included; a later include of the same file is
 * dropped (its definitions are already in scope).
 * @param baseDir the directory include paths are relative to.
 * @param file the script, relative to `baseDir`, e.g. `claim.lua`.
 * @returns the script source with every include inlined.
 * @throws IdempotencyError `ERR_IDEM_SCRIPT_LOAD` naming the file and line of a malformed or
 *   missing include or of an include cycle, or a script that names a key other than KEYS[1].
 */
export function resolveScript(baseDir: string, file: string): string {
  const path = join(baseDir, file)
  if (!existsSync(path)) {
    throw scriptLoadError(`Lua script "${file}" was not found in ${baseDir}.`)
  }
  const out: string[] = []
  inline(baseDir, file, [file], new Set(), out)
  const lua = out.join('\n')
  const otherKey = OTHER_KEY.exec(lua)
  if (otherKey !== null) {
    throw scriptLoadError(
      `Lua script "${file}" uses ${otherKey[0]}; every script must touch exactly one key, KEYS[1] (docs/design.md §2).`,
    )
  }
  return lua
}

function inline(baseDir: string, file: string, stack: string[], done: Set<string>, out: string[]): void {
  const lines = readFileSync(join(baseDir, file), 'utf8').split(/\r?\n/)
  for (let index = 0; index < lines.length; index++) {
    const line = lines[index] as string
    const include = INCLUDE_LINE.exec(line)
    if (include === null) {
      out.push(line)
      continue
    }
    const at = `"${file}" line ${index + 1}`
    const target = INCLUDE_TARGET.exec(include[1] as string)
    if (target === null) {
      throw scriptLoadError(
        `Malformed include in ${at}: expected --- @include "lib/<name>" (lowercase letters, digits, dashes).`,
      )
    }
    const included = `${target[1]}.lua`
    if (stack.includes(included)) {
      throw scriptLoadError(
        `Include cycle in ${at}: ${[...stack, included].join(' -> ')}. Helpers must not include each other in a loop.`,
      )
    }
    if (done.has(included)) continue
    if (!existsSync(join(baseDir, included))) {
      throw scriptLoadError(`Missing include in ${at}: "${included}" was not found in ${baseDir}.`)
    }
    inline(baseDir, included, [...stack, included], done, out)
    done.add(included)
  }
}

function scriptLoadError(message: string): IdempotencyError {
  return new IdempotencyError(ErrorCode.SCRIPT_LOAD, message)
}

/** The store's operations as one Redis Functions library (docs/design.md §6, "Redis Functions"). */
export interface FunctionLibrary<Name extends string = ScriptName> {
  /** `idemkit_<first 12 hex of the SHA-1 of the source>`: a new version is a new library. */
  readonly name: string
  /** What FUNCTION LOAD is sent: `#!lua name=<name>`, the helpers once, then every operation. */
  readonly source: string
  /** Each operation's function, `idemkit_<operation>_<the library's 12 hex>`. */
  readonly functions: Readonly<Record<Name, string>>
  /**
   * Operations whose script has no shebang: Redis runs such a script under `maxmemory` until it
   * writes, while a function without `allow-oom` is refused before it runs. A function of these
   * refused with OOM is sent again as its script, which then answers as it always did.
   */
  readonly oomAsScript: ReadonlySet<Name>
}

/** `#!lua flags=a,b` on a script's first line. */
const SHEBANG = /^#!lua(?:\s+flags=([a-z0-9,-]*))?\s*$/

let libraryCache: FunctionLibrary | undefined

/**
 * The store's functions library, built once per process from the same `.lua` files as the
 * scripts: every helper of `lib/` once at the top, each operation's body wrapped in a Lua
 * function of its own, registered with its shebang's flags. The scripts read `KEYS` and `ARGV`:
 * in the library those are locals of the top level, set by each registered function from
 * what FCALL passed before the body runs.
 * @throws IdempotencyError `ERR_IDEM_SCRIPT_LOAD` as `loadScripts` does.
 */
export function loadLibrary(): FunctionLibrary {
  libraryCache ??= buildLibrary(SCRIPTS_DIR, SCRIPT_NAMES)
  return libraryCache
}

/**
 * Builds a functions library from the scripts `names` of `baseDir` (see `loadLibrary`).
 * @param baseDir the directory of the scripts, with their `lib/`.
 * @param names the operations, one `<name>.lua` each.
 */
export function buildLibrary<Name extends string>(baseDir: string, names: readonly Name[]): FunctionLibrary<Name> {
  const helpers: string[] = []
  const done = new Set<string>()
  const bodies: string[] = []
  const registrations: string[] = []
  const oomAsScript = new Set<Name>()
  for (const name of names) {
    const file = `${name}.lua`
    resolveScript(baseDir, file) // the script's own checks: includes resolve, one key only
    const lines = readFileSync(join(baseDir, file), 'utf8').split(/\r?\n/)
    let flags: string[] = []
    const shebang = SHEBANG.exec(lines[0] ?? '')
    if (shebang !== null) {
      flags = (shebang[1] ?? '').split(',').filter((flag) => flag !== '')
      lines.shift()
    } else if ((lines[0] ?? '').startsWith('#!')) {
      throw scriptLoadError(`Lua script "${file}" has a shebang other than "#!lua flags=...".`)
    } else {
      oomAsScript.add(name)
    }
    const body: string[] = []
    for (const [index, line] of lines.entries()) {
      const include = INCLUDE_LINE.exec(line)
      if (include === null) {
        body.push(line)
        continue
      }
      // resolveScript accepted every include of this file: each names lib/<name>.
      const included = `${(INCLUDE_TARGET.exec(include[1] as string) as RegExpExecArray)[1]}.lua`
      if (!done.has(included)) {
        inline(baseDir, included, [file, included], done, helpers)
        done.add(included)
      }
      body.push(`-- (${file} line ${index + 1}: ${included}, above)`)
    }
    const local = `run_${name.replaceAll('-', '_')}`
    bodies.push(`local function ${local}()`, ...body, `end`)
    registrations.push(
      `redis.register_function{function_name='idemkit_${name.replaceAll('-', '_')}_@@VERSION@@', ` +
        `callback=function(keys, args) KEYS, ARGV = keys, args; return ${local}() end, ` +
        `flags={${flags.map((flag) => `'${flag}'`).join(', ')}}}`,
    )
  }
  const template = [
    '#!lua name=idemkit_@@VERSION@@',
    '-- The scripts read KEYS and ARGV: here locals, set by each function before its body runs.',
    'local KEYS, ARGV',
    ...helpers,
    ...bodies,
    ...registrations,
    '',
  ].join('\n')
  const version = createHash('sha1').update(template).digest('hex').slice(0, 12)
  const functions = {} as Record<Name, string>
  for (const name of names) functions[name] = `idemkit_${name.replaceAll('-', '_')}_${version}`
  return Object.freeze({
    name: `idemkit_${version}`,
    source: template.replaceAll('@@VERSION@@', version),
    functions: Object.freeze(functions),
    oomAsScript,
  })
}
