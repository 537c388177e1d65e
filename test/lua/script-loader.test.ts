import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { ErrorCode, IdempotencyError } from '../../src/core/errors.js'
import { loadScripts, resolveScript, SCRIPT_NAMES, SCRIPTS_DIR } from '../../src/stores/redis/script-loader.js'

const FIXTURES = fileURLToPath(new URL('./fixtures/', import.meta.url))

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
      if (name !== 'replace' && name !== 'touch') expect(script.lua).toContain("redis.call('TIME')")
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
