/**
 * docs/options.md names every option the validators accept, and no other: for each table, the
 * validator behind it is asked with an option it cannot know, and the names its refusal lists
 * are compared with the table's first column. The plugin table's "per route" column is compared
 * with what a route accepts.
 */
import { Redis } from 'ioredis'
import { describe, expect, it } from 'vitest'
import { idempotentFetch } from '../../src/client/index.js'
import { IdempotencyError } from '../../src/core/errors.js'
import { ReplayCache } from '../../src/core/replay-cache.js'
import { parseOptions } from '../../src/http/options.js'
import { type ResolvedRoute, resolveRoute } from '../../src/http/route-options.js'
import { idempotentBatch } from '../../src/jobs/batch.js'
import { IDEMPOTENT_OPTIONS, parseIdempotentOptions } from '../../src/jobs/options.js'
import { memoryStore } from '../../src/stores/memory/index.js'
import { postgresStore } from '../../src/stores/postgres/index.js'
import { redisStore } from '../../src/stores/redis/index.js'
import { type TableRow, tablesUnder } from './markdown.js'

const PAGE = 'docs/options.md'
const PROBE = 'notAnOptionOfIdemkit'

/** The names a validator lists when it refuses `PROBE` as an unknown option. */
function accepted(call: () => unknown): string[] {
  let refusal: unknown
  try {
    call()
  } catch (error) {
    refusal = error
  }
  if (!(refusal instanceof IdempotencyError) || !refusal.message.includes(PROBE)) {
    throw new Error(`the validator did not refuse the unknown option: ${String(refusal)}`)
  }
  // "... must be one of a, b, c (unknown option); ..." or "... one of the known options (a, b, c); ..."
  const list = /one of (?:the known options \()?([A-Za-z, ]+?)(?:\)| \(unknown option\))/.exec(refusal.message)?.[1]
  if (list === undefined) throw new Error(`no list of options in: ${refusal.message}`)
  return list.split(',').map((name) => name.trim())
}

/** The option names of a table: its first column's code span. */
function names(rows: readonly TableRow[]): string[] {
  return rows.map((row) => /^`([A-Za-z.]+)`$/.exec(row.cells.option ?? '')?.[1] ?? `(row ${row.line}: no name)`)
}

const sorted = (list: readonly string[]) => [...list].sort()
const unknown = { [PROBE]: true }

const TABLES: readonly (readonly [string, () => string[]])[] = [
  [
    'Plugin and middleware options',
    () => accepted(() => parseOptions({ store: memoryStore(), secrets: { current: 1, keys: {} }, ...unknown })),
  ],
  [
    'idempotent() options',
    () =>
      accepted(() =>
        parseIdempotentOptions({ store: memoryStore(), secrets: { current: 1, keys: {} }, ...unknown } as never),
      ),
  ],
  [
    'idempotentBatch() options',
    () =>
      accepted(() =>
        idempotentBatch(async () => undefined, {
          store: memoryStore(),
          secrets: { current: 1, keys: { 1: 'x'.repeat(32) } },
          operation: 'op',
          key: 'id',
          ...unknown,
        }),
      ).filter((name) => !(IDEMPOTENT_OPTIONS as readonly string[]).includes(name)),
  ],
  ['Replay cache', () => accepted(() => new ReplayCache(unknown as never))],
  ['redisStore()', () => accepted(() => redisStore(unknown as never))],
  [
    'redisStore() durability',
    () => {
      const redis = new Redis({ lazyConnect: true })
      try {
        return accepted(() => redisStore({ redis, durability: unknown as never }))
      } finally {
        redis.disconnect()
      }
    },
  ],
  ['postgresStore()', () => accepted(() => postgresStore(unknown as never))],
  ['memoryStore()', () => accepted(() => memoryStore(unknown as never))],
  ['idempotentFetch.with()', () => accepted(() => idempotentFetch.with(unknown as never))],
]

describe('the options reference', () => {
  it.each(TABLES)('lists exactly the options the validator accepts: %s', (heading, validator) => {
    const rows = tablesUnder(PAGE, heading)
    expect(rows.length, `a table under "${heading}"`).toBeGreaterThan(0)
    expect(sorted(names(rows))).toEqual(sorted(validator()))
  })

  it('marks per route exactly the options a route accepts', () => {
    const rows = tablesUnder(PAGE, 'Plugin and middleware options')
    const perRoute = rows.filter((row) => /^(yes|only per route)$/.test(row.cells['per route'] ?? ''))
    const route = accepted(() => resolveRoute(unknown as never, undefined as unknown as ResolvedRoute<unknown>, ''))
    expect(sorted(names(perRoute))).toEqual(sorted(route))
  })

  it('gives every option a type, a default and an effect', () => {
    const rows = TABLES.flatMap(([heading]) => tablesUnder(PAGE, heading))
    const incomplete = rows.filter((row) => ['type', 'default', 'effect'].some((column) => !row.cells[column]))
    expect(incomplete.map((row) => `${PAGE}:${row.line}`)).toEqual([])
  })
})
