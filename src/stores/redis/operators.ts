/**
 * The Redis store's calls for operators (`idemkit inspect`, `resolve`, `scan`): a record read as
 * stored with Redis's clock, a record replaced only if unchanged (replace.lua), and every record
 * under the store's key prefix by SCAN. None of them is on a request's path.
 */
import type { Cluster, Redis } from 'ioredis'
import { StoreProtocolError } from '../../core/errors.js'
import type { ReadResult, RecordView, ScannedRecord } from '../../core/store.js'
import { checkKey } from '../../core/store-args.js'
import { decodeRecord, encodeRecord, RECORD_HEADER_BYTES } from '../record-layout.js'
import { redisFault } from './faults.js'
import type { ScriptCommand } from './script-calls.js'

/**
 * The record under `key` as stored (record layout 2), live or not, with Redis's clock: for
 * operators (`idemkit inspect`). A layout-1 record (a hash, written by 0.1) is refused with
 * StoreProtocolError.
 */
export async function readRecord(redis: Redis | Cluster, key: string): Promise<ReadResult> {
  checkKey(key)
  let time: readonly (number | string)[]
  let bytes: Buffer | null
  let expireTime: number
  try {
    ;[time, bytes, expireTime] = await Promise.all([redis.time(), redis.getBuffer(key), redis.pexpiretime(key)])
  } catch (error) {
    if (error instanceof Error && error.message.startsWith('WRONGTYPE')) {
      throw new StoreProtocolError('The record is in layout 1 (a hash, written by 0.1); read it with HGETALL.')
    }
    throw redisFault(error)
  }
  const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000)
  return { record: bytes === null ? undefined : decodeRecord(bytes, expireTime), now }
}

/** Operators only: replaces (or deletes) the record if it is still `expected` (see `IdempotencyStore.replace`). */
export async function replaceRecord(
  replace: ScriptCommand,
  key: string,
  expected: RecordView,
  next: RecordView | undefined,
): Promise<boolean> {
  checkKey(key)
  const header = encodeRecord(expected).subarray(0, RECORD_HEADER_BYTES)
  const args: (Buffer | string)[] =
    next === undefined ? [header, '', '0'] : [header, encodeRecord(next), String(next.expiresAt)]
  try {
    return (await replace(key, ...args)) === 1
  } catch (error) {
    throw redisFault(error)
  }
}

/**
 * Operators only: every record under this store's key prefix, by SCAN (on a Cluster, on every
 * master), read in batches with Redis's clock (`keyPrefix`: the store's). A layout-1 record (a hash) is skipped.
 */
export async function* scanRecords(client: Redis | Cluster, keyPrefix: string): AsyncIterable<ScannedRecord> {
  const nodes = client.isCluster ? (client as Cluster).nodes('master') : [client as Redis]
  for (const node of nodes) {
    const clientPrefix = node.options.keyPrefix ?? ''
    const pattern = `${clientPrefix}${keyPrefix}:idem:*`
    let cursor = '0'
    do {
      let keys: string[]
      let replies: [Error | null, unknown][] | null
      try {
        ;[cursor, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 500)
        const pipeline = node.pipeline().time()
        // The client adds its own prefix to every command: the keys SCAN gave carry it already.
        for (const key of keys) {
          pipeline.getBuffer(key.slice(clientPrefix.length)).pexpiretime(key.slice(clientPrefix.length))
        }
        replies = await pipeline.exec()
      } catch (error) {
        throw redisFault(error)
      }
      if (replies === null) throw redisFault(new Error('The scan pipeline was discarded.'))
      const time = replies[0]?.[1] as (string | number)[]
      const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000)
      for (const [index, key] of keys.entries()) {
        const [error, bytes] = replies[2 * index + 1] ?? [null, null]
        if (error !== null || !Buffer.isBuffer(bytes)) continue
        const expireTime = replies[2 * index + 2]?.[1]
        yield {
          key: key.slice(clientPrefix.length),
          record: decodeRecord(bytes, typeof expireTime === 'number' ? expireTime : undefined),
          now,
        }
      }
    } while (cursor !== '0')
  }
}
