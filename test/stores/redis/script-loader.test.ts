import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { ErrorCode, IdempotencyError } from '../../../src/core/errors.js'
import {
  buildLibrary,
  loadLibrary,
  loadScripts,
  resolveScript,
  SCRIPT_NAMES,
  SCRIPTS_DIR,
} from '../../../src/stores/redis/script-loader.js'

const FIXTURES = fileURLToPath(new URL('./lua-fixtures/', import.meta.url))

function loadError(file: string): IdempotencyError {
  try {
    resolveScript(FIXTURES, file)
  } catch (error) {
    expect(error).toBeInstanceOf(IdempotencyError)
    return error as IdempotencyError
  }
  throw new Error(`resolveScript(${file}) did not throw`)
}

describe('resolveScript', () => {
  it('inlines an include in place of its line when the include exists', () => {
    const lua = resolveScript(FIXTURES, 'good.lua')

    expect(lua).toBe('local function one() return 1 end\n\nreturn one()\n')
  })

  it('inlines nested includes once, where first included, when two files include the same helper', () => {
    const lua = resolveScript(FIXTURES, 'nested.lua')

    expect(lua.match(/local function one\(\)/g)).toHaveLength(1)
    expect(lua.indexOf('function one()')).toBeLessThan(lua.indexOf('function two()'))
    expect(lua).not.toContain('@include')
  })

  it('names the file and line when an include is missing', () => {
    const error = loadError('missing.lua')

    expect(error.code).toBe(ErrorCode.SCRIPT_LOAD)
    expect(error.message).toContain('"missing.lua" line 2')
    expect(error.message).toContain('lib/nope.lua')
  })

  it('names the file, line and chain when includes form a cycle', () => {
    const error = loadError('cycle.lua')

    expect(error.code).toBe(ErrorCode.SCRIPT_LOAD)
    expect(error.message).toContain('"lib/cycle-b.lua" line 2')
    expect(error.message).toContain('cycle.lua -> lib/cycle-a.lua -> lib/cycle-b.lua -> lib/cycle-a.lua')
  })

  it('names the file and line when an include has no quoted lib/ name', () => {
    const error = loadError('malformed.lua')

    expect(error.code).toBe(ErrorCode.SCRIPT_LOAD)
    expect(error.message).toContain('"malformed.lua" line 1')
  })

  it('rejects a script when it names a key other than KEYS[1]', () => {
    const error = loadError('two-keys.lua')

    expect(error.code).toBe(ErrorCode.SCRIPT_LOAD)
    expect(error.message).toContain('KEYS[2]')
  })

  it('names the script when the file does not exist', () => {
    const error = loadError('absent.lua')

    expect(error.code).toBe(ErrorCode.SCRIPT_LOAD)
    expect(error.message).toContain('"absent.lua"')
  })
})

describe('loadScripts', () => {
  it('resolves every operation and names it by version when the scripts directory is read', () => {
    const scripts = loadScripts()

    expect(Object.keys(scripts).sort()).toEqual([...SCRIPT_NAMES].sort())
    for (const name of SCRIPT_NAMES) {
      const script = scripts[name]
      expect(script.lua).not.toMatch(/@include/)
      if (name !== 'replace' && name !== 'touch' && name !== 'compare-and-set')
        expect(script.lua).toContain("redis.call('TIME')")
      expect(script.sha1).toMatch(/^[0-9a-f]{40}$/)
      expect(script.commandName).toBe(`idemkit_${name.replaceAll('-', '_')}_${script.sha1.slice(0, 12)}`)
    }
  })

  it('returns the same frozen object when called again (loaded once per process)', () => {
    const first = loadScripts()

    expect(loadScripts()).toBe(first)
    expect(Object.isFrozen(first)).toBe(true)
  })

  it('reads the scripts next to the loader module when run from source', () => {
    expect(SCRIPTS_DIR.replaceAll('\\', '/')).toMatch(/\/src\/stores\/redis\/scripts\/$/)
  })
})

describe('loadLibrary', () => {
  it('builds one library: helpers once, each operation a function named by the hash, with its shebang flags', () => {
    const library = loadLibrary()
    const version = library.name.slice('idemkit_'.length)

    expect(version).toMatch(/^[0-9a-f]{12}$/)
    expect(library.source.startsWith(`#!lua name=${library.name}\n`)).toBe(true)
    expect(library.source).not.toContain('@include')
    expect(library.source).not.toContain('@@VERSION@@')
    expect(library.source.match(/local function now_ms\(\)/g)).toHaveLength(1)
    for (const name of SCRIPT_NAMES) {
      const fn = library.functions[name]
      expect(fn).toBe(`idemkit_${name.replaceAll('-', '_')}_${version}`)
      const registration = new RegExp(`function_name='${fn}', .*flags=\\{([^}]*)\\}\\}`).exec(library.source)
      const shebang = /^#!lua flags=(\S+)/.exec(loadScripts()[name].lua)?.[1]
      expect(registration?.[1], name).toBe(shebang === undefined ? '' : `'${shebang}'`)
    }
    expect(library.functions.inspect).toMatch(/^idemkit_inspect_/)
    expect([...library.oomAsScript]).toEqual(['claim'])
  })

  it('names another version of the sources by another hash', () => {
    const dir = mkdtempSync(join(tmpdir(), 'idemkit-lib-'))
    try {
      cpSync(SCRIPTS_DIR, dir, { recursive: true })
      expect(buildLibrary(dir, SCRIPT_NAMES).name).toBe(loadLibrary().name)
      writeFileSync(join(dir, 'touch.lua'), '\n-- changed\n', { flag: 'a' })
      const other = buildLibrary(dir, SCRIPT_NAMES)
      expect(other.name).not.toBe(loadLibrary().name)
      expect(other.functions.claim).not.toBe(loadLibrary().functions.claim)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
