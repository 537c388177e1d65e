/**
 * The MONITOR line reader the Redis tests count commands with (redis-monitor.ts), on lines as
 * Redis 7.0 prints them and as Valkey 8.1.1 does (quotes and backslashes inside an argument
 * unescaped, valkey-io/valkey#2035): a command missed or split wrongly there would make the tests
 * that read the order of commands fail on that server for no fault of the store.
 */
import { describe, expect, it } from 'vitest'
import { parseMonitorLine } from './redis-monitor.js'

describe('parseMonitorLine', () => {
  it('reads a line with every escape Redis writes', () => {
    expect(parseMonitorLine('+1339518083.107412 [0 127.0.0.1:60866] "set" "k" "a\\"b\\\\c\\n\\x00\\xff"')).toEqual({
      time: '1339518083.107412',
      source: '127.0.0.1:60866',
      args: ['set', 'k', 'a"b\\c\n\x00\xff'],
    })
    expect(parseMonitorLine('+1.5 [0 lua] "SET" "k" "{\\"c\\":3}" "KEEPTTL"')).toEqual({
      time: '1.5',
      source: 'lua',
      args: ['SET', 'k', '{"c":3}', 'KEEPTTL'],
    })
  })

  it('reads a line whose quotes inside an argument are not escaped (Valkey 8.1.0 and 8.1.1)', () => {
    expect(parseMonitorLine('+1.5 [0 lua] "SET" "k" "\\x02D{"c":3}" "PXAT" "5"')).toEqual({
      time: '1.5',
      source: 'lua',
      args: ['SET', 'k', '\x02D{"c":3}', 'PXAT', '5'],
    })
    expect(parseMonitorLine('+1.5 [0 127.0.0.1:1] "evalsha" "abc" "1" "key" "{"e":5}"')?.args).toEqual([
      'evalsha',
      'abc',
      '1',
      'key',
      '{"e":5}',
    ])
  })

  it('answers undefined for a line that is not a command', () => {
    expect(parseMonitorLine('+OK')).toBeUndefined()
    expect(parseMonitorLine('-ERR unknown command')).toBeUndefined()
  })
})
