import { Command } from 'ioredis'
import { describe, expect, it } from 'vitest'
import { respFrame } from '../../../src/stores/redis/framed.js'

/** The bytes ioredis itself writes for `name args`. */
function ioredisFrame(name: string, args: (string | Buffer)[]): Buffer {
  const written = new Command(name, args).toWritable({})
  return Buffer.isBuffer(written) ? written : Buffer.from(written, 'utf8')
}

describe('respFrame: a command with byte arguments as one RESP frame', () => {
  const bytes = Buffer.from([0, 1, 0x80, 0xff, 13, 10, 36])
  const cases: [string, string, (string | Buffer)[]][] = [
    ['a SET of a record', 'set', ['idemkit:idem:1:k', bytes, 'PX', '35000', 'NX', 'GET']],
    ['an FCALL with a response last', 'fcall', ['idemkit_complete_v3', '1', 'key', 'owner', bytes]],
    ['bytes first and last, back to back', 'set', [bytes, bytes]],
    ['empty bytes and empty text', 'set', ['', Buffer.alloc(0), '']],
    ['text outside ASCII (the key, an argument)', 'set', ['clé:ключ:鍵', bytes, 'émoji 🎉']],
    ['text only', 'get', ['k']],
  ]
  for (const [label, name, args] of cases) {
    it(`writes the bytes ioredis writes: ${label}`, () => {
      expect(respFrame(name, args)).toEqual(ioredisFrame(name, args))
    })
  }

  it('counts a byte argument by its bytes and a text one by its UTF-8 length', () => {
    expect(respFrame('set', ['é', Buffer.from('é', 'latin1')]).toString('latin1')).toBe(
      '*3\r\n$3\r\nset\r\n$2\r\n\u00c3\u00a9\r\n$1\r\n\u00e9\r\n',
    )
  })
})
