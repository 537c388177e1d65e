import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ErrorCode, StoreProtocolError } from '../../../src/core/errors.js'
import {
  ClaimReply,
  ExpiredExecution,
  FailureKind,
  InspectReply,
  RecordState,
  RecoveryReason,
  TransitionReply,
} from '../../../src/core/record.js'
import { encodeRecord, LAYOUT_1_FIELDS, STATE_CODES, type StoredRecord } from '../../../src/stores/record-layout.js'
import {
  decodeClaimReply,
  decodeInspectReply,
  decodeRenewReply,
  decodeTransitionReply,
} from '../../../src/stores/redis/replies.js'
import { loadScripts, SCRIPTS_DIR } from '../../../src/stores/redis/script-loader.js'

/** Every `.lua` file under the scripts directory, relative path -> source. */
function luaFiles(): Map<string, string> {
  const files = new Map<string, string>()
  for (const entry of readdirSync(SCRIPTS_DIR, { recursive: true, encoding: 'utf8' })) {
    if (entry.endsWith('.lua')) files.set(entry.replaceAll('\\', '/'), readFileSync(join(SCRIPTS_DIR, entry), 'utf8'))
  }
  return files
}

/** Source without comments: `--[[ ... ]]` blocks, then `--` to the end of a line. */
function stripComments(lua: string): string {
  return lua.replace(/--\[\[[\s\S]*?\]\]/g, '').replace(/--.*$/gm, '')
}

/**
 * Quoted string literals of the code, except the command name passed to `redis.call` (which
 * is Redis's vocabulary, not ours).
 */
function literals(lua: string): string[] {
  const code = stripComments(lua).replace(/redis\.p?call\(\s*'[A-Z]+'/g, 'redis.call(')
  return [...code.matchAll(/'([^'\\]*)'|"([^"\\]*)"/g)].map((m) => (m[1] ?? m[2]) as string)
}

/** The text between the parenthesis or brace that `opener` ends with and its match. */
function spans(code: string, opener: string): string[] {
  const found: string[] = []
  const close = opener.endsWith('{') ? '}' : ')'
  const open = close === '}' ? '{' : '('
  for (let at = code.indexOf(opener); at !== -1; at = code.indexOf(opener, at + 1)) {
    let depth = 1
    let end = at + opener.length
    for (; end < code.length && depth > 0; end++) {
      if (code[end] === open) depth++
      else if (code[end] === close) depth--
    }
    found.push(code.slice(at + opener.length, end - 1))
  }
  return found
}

const REPLY_WORDS: ReadonlySet<string> = new Set<string>([
  ...Object.values(ClaimReply),
  ...Object.values(TransitionReply),
  ...Object.values(InspectReply),
  ...Object.values(RecoveryReason),
  ...Object.values(RecordState),
  // Record layout 2's state codes, the Redis error a layout-1 hash answers GET with, and
  // SET's options for the key's expiry (touch.lua keeps it; compare-and-set.lua sets it from now).
  ...STATE_CODES,
  'WRONGTYPE',
  'PXAT',
  'PX',
  'KEEPTTL',
])

/** A layout-2 record for decoder tests: COMPLETED unless told otherwise. */
function stored(fields: Partial<StoredRecord> = {}): StoredRecord {
  return {
    state: 'COMPLETED',
    owner: 'a'.repeat(64),
    attempt: 1,
    rev: 3,
    leaseUntil: 5,
    replayUntil: 9,
    expiresAt: 9,
    createdAt: 1,
    updatedAt: 2,
    fp: 'fp',
    codec: 'c',
    policy: 'p',
    op: 'op',
    response: Buffer.alloc(0),
    ...fields,
  }
}

describe('Lua reply literals', () => {
  it('finds the scripts and their helpers when it scans the scripts directory', () => {
    const names = [...luaFiles().keys()].sort()

    expect(names).toEqual(
      expect.arrayContaining([
        'claim.lua',
        'inspect.lua',
        'lib/live.lua',
        'lib/now.lua',
        'lib/record.lua',
        'lib/transition.lua',
      ]),
    )
  })

  it('uses only record.ts reply and state names when a script writes an uppercase literal', () => {
    const strays: string[] = []
    let seen = 0
    for (const [file, lua] of luaFiles()) {
      for (const literal of literals(lua)) {
        if (!/^[A-Z][A-Z_]*$/.test(literal)) continue
        seen++
        if (!REPLY_WORDS.has(literal)) strays.push(`${file}: '${literal}'`)
      }
    }

    expect(seen).toBeGreaterThan(20)
    expect(strays).toEqual([])
  })

  it('uses only layout-1 field names when a script reads a record of version 1 (a hash)', () => {
    const fields: string[] = []
    for (const lua of luaFiles().values()) {
      const code = stripComments(lua)
      for (const opener of ["redis.call('HGET',", "redis.call('HMGET',", 'LEGACY_FIELDS = {']) {
        for (const args of spans(code, opener)) fields.push(...literals(args).filter((l) => /^[a-z][A-Za-z]*$/.test(l)))
      }
    }
    const fieldNames = new Set<string>(LAYOUT_1_FIELDS)

    expect(fields.length).toBeGreaterThanOrEqual(fieldNames.size)
    expect(fields.filter((f) => !fieldNames.has(f))).toEqual([])
    expect(new Set(fields)).toEqual(fieldNames)
  })

  it('accepts only FailureKind and ExpiredExecution values when a script reads a choice argument', () => {
    const choices: string[] = []
    for (const lua of luaFiles().values()) {
      for (const args of spans(stripComments(lua), 'argv_choice(')) {
        choices.push(...literals(args).filter((v) => v !== '0' && v !== '1'))
      }
    }

    expect(choices.sort()).toEqual([...Object.values(FailureKind), ...Object.values(ExpiredExecution)].sort())
  })

  it('can answer every claim, inspect and transition kind when the resolved scripts are read', () => {
    const scripts = loadScripts()
    const words = (lua: string) => new Set(literals(lua))
    const claim = words(scripts.claim.lua)
    const inspect = words(scripts.inspect.lua)
    const transitions = [scripts.start, scripts.complete, scripts['mark-failed']].map((s) => words(s.lua))
    const release = words(scripts.release.lua)
    const renew = words(scripts.renew.lua)

    for (const kind of Object.values(ClaimReply)) expect(claim, kind).toContain(kind)
    // The reasons a store answers with (claim steps 4 and 7); the others are the executor's own.
    for (const reason of [RecoveryReason.ABANDONED, RecoveryReason.EXPIRED_EXECUTION])
      expect(claim, reason).toContain(reason)
    for (const kind of Object.values(InspectReply)) expect(inspect, kind).toContain(kind)
    for (const set of transitions) {
      for (const kind of Object.values(TransitionReply)) expect(set, kind).toContain(kind)
    }
    for (const kind of ['OK', 'NOT_FOUND', 'NOT_OWNER', 'WRONG_STATE']) {
      expect(release, kind).toContain(kind)
      expect(renew, kind).toContain(kind)
    }
  })

  it('never returns ALREADY when renew is resolved (docs/design.md §7 defect 3)', () => {
    const renew = stripComments(loadScripts().renew.lua)
    const code = renew.replace(/local function transition\([\s\S]*?\nend\n/, '')

    expect(code).not.toContain("'ALREADY'")
    expect(code).not.toMatch(/\btransition\(/)
  })

  it('finds a --[[ ]] header naming KEYS[1] and each ARGV read when it opens every script', () => {
    for (const [file, source] of luaFiles()) {
      // A shebang with script flags must be the first line; the header follows it.
      const lua = source.replace(/^#!lua flags=[a-z,-]+\n/, '')
      expect(lua.startsWith('--[['), file).toBe(true)
      if (file.startsWith('lib/')) continue
      const header = lua.slice(0, lua.indexOf(']]'))
      expect(header, file).toContain('KEYS[1]')
      expect(header, file).toContain('Replies')
      const used = new Set([...stripComments(lua).matchAll(/ARGV\[(\d+)\]|argv_\w+\((\d+)/g)].map((m) => m[1] ?? m[2]))
      for (const index of used)
        expect(header, `${file} ARGV[${index}]`).toMatch(new RegExp(`ARGV\\[${index}(\\]|\\.\\.)`))
    }
  })

  it('never passes a timestamp in ARGV when a script reads the time', () => {
    for (const [file, lua] of luaFiles()) {
      const header = lua.slice(0, lua.indexOf(']]'))
      expect(header, file).not.toMatch(/ARGV\[\d+\]\s+(now|time|timestamp)/i)
    }
    for (const script of Object.values(loadScripts())) {
      // replace (operators only), touch (durability) and compare-and-set (oneCommandCompletion)
      // decide nothing by the clock; every other script reads it once.
      expect(script.lua.match(/redis\.call\('TIME'\)/g) ?? [], script.name).toHaveLength(
        ['replace', 'touch', 'compare-and-set'].includes(script.name) ? 0 : 1,
      )
    }
  })
})

function protocolError(decode: () => unknown): StoreProtocolError {
  try {
    decode()
  } catch (error) {
    expect(error).toBeInstanceOf(StoreProtocolError)
    expect((error as StoreProtocolError).code).toBe(ErrorCode.STORE_PROTOCOL)
    return error as StoreProtocolError
  }
  throw new Error('the decoder accepted a malformed reply')
}

describe('decodeClaimReply', () => {
  it('decodes every documented claim reply when the shape is right', () => {
    expect(decodeClaimReply(['ACQUIRED', 'EXECUTING', 1, 1, 1_000])).toEqual({
      kind: 'ACQUIRED',
      state: 'EXECUTING',
      attempt: 1,
      rev: 1,
      leaseUntil: 1_000,
    })
    expect(decodeClaimReply(['TAKEN_OVER', 'CLAIMED', 2, 3, 5])).toMatchObject({ kind: 'TAKEN_OVER', attempt: 2 })
    expect(decodeClaimReply(['REPLAYED_ACQUIRE', 'CLAIMED', 1, 1, 5])).toMatchObject({ kind: 'REPLAYED_ACQUIRE' })
    expect(decodeClaimReply(['COMPLETED_REPLAY', encodeRecord(stored({ response: Buffer.from('r') }))])).toEqual({
      kind: 'COMPLETED_REPLAY',
      response: Buffer.from('r'),
      codec: 'c',
      policy: 'p',
      replayUntil: 9,
    })
    expect(decodeClaimReply(['FINGERPRINT_MISMATCH'])).toEqual({ kind: 'FINGERPRINT_MISMATCH' })
    expect(decodeClaimReply(['RECOVERY_REQUIRED', 'EXPIRED_EXECUTION'])).toEqual({
      kind: 'RECOVERY_REQUIRED',
      reason: 'EXPIRED_EXECUTION',
    })
    expect(decodeClaimReply(['IN_PROGRESS', 7])).toEqual({ kind: 'IN_PROGRESS', retryAfterMs: 7 })
  })

  it.each([
    ['not an array', 'ACQUIRED'],
    ['an empty array', []],
    ['null', null],
    ['an unknown kind', ['WON', 'CLAIMED', 1, 1, 1]],
    ['a kind of another reply', ['OK', 2]],
    ['a missing element', ['ACQUIRED', 'CLAIMED', 1, 1]],
    ['an extra element', ['FINGERPRINT_MISMATCH', 1]],
    ['a held state that is not held', ['ACQUIRED', 'COMPLETED', 1, 1, 1]],
    ['an attempt of 0', ['ACQUIRED', 'CLAIMED', 0, 1, 1]],
    ['a numeric string', ['ACQUIRED', 'CLAIMED', '1', 1, 1]],
    ['a fraction', ['IN_PROGRESS', 1.5]],
    ['a zero retry-after', ['IN_PROGRESS', 0]],
    ['an unknown recovery reason', ['RECOVERY_REQUIRED', 'BORED']],
    ['a record that is not bytes', ['COMPLETED_REPLAY', 1]],
    ['a record of another layout', ['COMPLETED_REPLAY', Buffer.from('{"state":"COMPLETED"}')]],
    ['a record with an empty codec', ['COMPLETED_REPLAY', encodeRecord(stored({ codec: '' }))]],
    ['the fields of layout 1', ['COMPLETED_REPLAY', 'r', 'c', 'p', 9]],
  ])('throws StoreProtocolError when the reply has %s', (_name, reply) => {
    const error = protocolError(() => decodeClaimReply(reply))

    expect(error.message).toContain('claim')
  })
})

describe('decodeTransitionReply', () => {
  it('decodes every documented transition reply when the shape is right', () => {
    expect(decodeTransitionReply('start', ['OK', 2])).toEqual({ kind: 'OK', rev: 2 })
    expect(decodeTransitionReply('release', ['OK', 0])).toEqual({ kind: 'OK', rev: 0 })
    expect(decodeTransitionReply('start', ['ALREADY', 2])).toEqual({ kind: 'ALREADY', rev: 2 })
    expect(decodeTransitionReply('start', ['NOT_FOUND'])).toEqual({ kind: 'NOT_FOUND' })
    expect(decodeTransitionReply('start', ['NOT_OWNER'])).toEqual({ kind: 'NOT_OWNER' })
    expect(decodeTransitionReply('start', ['WRONG_STATE', 'COMPLETED'])).toEqual({
      kind: 'WRONG_STATE',
      state: 'COMPLETED',
    })
  })

  it.each([
    ['a string rev', ['OK', '2']],
    ['a negative rev', ['OK', -1]],
    ['an ALREADY at rev 1', ['ALREADY', 1]],
    ['an unknown state', ['WRONG_STATE', 'ABSENT']],
    ['a NOT_FOUND with data', ['NOT_FOUND', 1]],
    ['a claim kind', ['ACQUIRED', 'CLAIMED', 1, 1, 1]],
    ['an unsafe integer', ['OK', 2 ** 60]],
  ])('throws StoreProtocolError when the reply has %s', (_name, reply) => {
    const error = protocolError(() => decodeTransitionReply('complete', reply))

    expect(error.message).toContain('complete')
  })
})

describe('decodeRenewReply', () => {
  it('decodes the new lease end when renew answers OK', () => {
    expect(decodeRenewReply(['OK', 123])).toEqual({ kind: 'OK', leaseUntil: 123 })
    expect(decodeRenewReply(['WRONG_STATE', 'ABANDONED'])).toEqual({ kind: 'WRONG_STATE', state: 'ABANDONED' })
  })

  it.each([
    ['ALREADY (renew never short-circuits)', ['ALREADY', 3]],
    ['an OK without a lease', ['OK']],
    ['a zero lease end', ['OK', 0]],
  ])('throws StoreProtocolError when the reply is %s', (_name, reply) => {
    protocolError(() => decodeRenewReply(reply))
  })
})

describe('decodeInspectReply', () => {
  it('decodes every documented inspect reply when the shape is right', () => {
    expect(decodeInspectReply(['ABSENT'])).toEqual({ kind: 'ABSENT' })
    const executing = stored({ state: 'EXECUTING', attempt: 2, rev: 3, leaseUntil: 50, replayUntil: 0 })
    expect(decodeInspectReply([Buffer.from('EXECUTING'), 1, 0, encodeRecord(executing)])).toEqual({
      kind: 'EXECUTING',
      mine: true,
      attempt: 2,
      rev: 3,
      fingerprint: 'fp',
      operation: 'op',
      leaseUntil: 50,
      leaseRemainingMs: 0,
    })
    expect(decodeInspectReply(['COMPLETED', 0, 0, encodeRecord(stored({ response: Buffer.from('r') }))])).toMatchObject(
      {
        kind: 'COMPLETED',
        mine: false,
        response: Buffer.from('r'),
        replayUntil: 9,
      },
    )
    expect(
      decodeInspectReply(['ABANDONED', 0, 0, encodeRecord(stored({ state: 'ABANDONED', replayUntil: 0 }))]),
    ).toMatchObject({
      kind: 'ABANDONED',
      rev: 3,
    })
  })

  it.each([
    ['a boolean mine', ['CLAIMED', true, 5, encodeRecord(stored({ state: 'CLAIMED' }))]],
    ['a mine of 2', ['FAILED_RETRYABLE', 2, 0, encodeRecord(stored({ state: 'FAILED_RETRYABLE' }))]],
    ['an empty fingerprint', ['FAILED_RETRYABLE', 0, 0, encodeRecord(stored({ state: 'FAILED_RETRYABLE', fp: '' }))]],
    ['a negative lease remaining', ['CLAIMED', 0, -1, encodeRecord(stored({ state: 'CLAIMED' }))]],
    ['a record in another state than named', ['EXECUTING', 0, 0, encodeRecord(stored({ state: 'COMPLETED' }))]],
    ['a record that is not bytes', ['COMPLETED', 0, 0, 'r']],
    ['the fields of layout 1', ['COMPLETED', 0, 1, 3, 'fp', 'op', 'r', 'c', 'p', 9]],
    ['an ABSENT with fields', ['ABSENT', 0]],
    ['a claim kind', ['IN_PROGRESS', 5]],
  ])('throws StoreProtocolError when the reply has %s', (_name, reply) => {
    const error = protocolError(() => decodeInspectReply(reply))

    expect(error.message).toContain('inspect')
  })
})
