/**
 * Fault 10: bad input over raw sockets. 10,000 generated requests (a fixed fast-check seed):
 * Idempotency-Key values that are empty, 255 and 256 characters long, control bytes,
 * non-ASCII, `{x}` hash-tag text, CRLF inside the value, quoted and unquoted, with bad
 * escapes, as a list, with parameters, on two header lines or none; bodies that are valid,
 * empty, malformed, deeply nested, of the wrong shape or over the body limit; and missing or
 * wrong credentials. No answer may be a 5xx, no rejected request may run the handler, and
 * Redis may hold nothing but digest-shaped record keys.
 */
import fc from 'fast-check'
import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AppProcess } from '../helpers/app-process.js'
import { createExecutionLog, type ExecutionLog } from '../helpers/execution-log.js'
import { RECORD_KEY_SHAPE, startFaultApp } from '../helpers/fault-app.js'
import { type FaultRedis, startFaultRedis } from '../helpers/fault-redis.js'
import { recordFigures, tally } from '../helpers/figures.js'
import { buildRequest, type RawAnswer, rawRequest } from '../helpers/raw-http.js'

const CASES = 10_000
const SEED = 10
const PARALLEL = 16

interface Case {
  readonly keys: readonly string[]
  readonly auth: string | undefined
  readonly contentType: string | undefined
  readonly body: string
}

const specialKeys = [
  '',
  ' ',
  '  \t ',
  '"',
  '""',
  '"abc',
  'abc"',
  '"a\\"b"',
  '"a\\\\b"',
  '"a\\qb"',
  '"a"b',
  '{x}',
  '{x}abc',
  'abc{x}',
  '"{x}"',
  '{}',
  'a, b',
  '"a", "b"',
  'a,',
  'a;p=1',
  '"a";p=1',
  'k'.repeat(255),
  'k'.repeat(256),
  `"${'k'.repeat(255)}"`,
  `"${'k'.repeat(256)}"`,
  'é',
  '日本語',
  'ключ',
  'a\u0000b',
  'a\u0001',
  'a\u007f',
  'a\tb',
  'a b',
  'a\r\nX-Injected: 1',
  'a\r\nIdempotency-Key: b',
  'a\nb',
  'a\rb',
  '\r\n',
]

const keyValue = fc.oneof(
  { weight: 5, arbitrary: fc.uuid() },
  { weight: 4, arbitrary: fc.constantFrom(...specialKeys) },
  { weight: 2, arbitrary: fc.string({ maxLength: 300 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  {
    weight: 2,
    arbitrary: fc.string({
      unit: fc.constantFrom(
        'a',
        'Z',
        '9',
        '{',
        '}',
        'x',
        '"',
        '\\',
        ',',
        ';',
        '=',
        ' ',
        '\t',
        '\r',
        '\n',
        '\u0000',
        '\u007f',
        'é',
      ),
      maxLength: 24,
    }),
  },
  { weight: 1, arbitrary: fc.string({ maxLength: 40 }).map((s) => `"${s}"`) },
  { weight: 1, arbitrary: fc.integer({ min: 250, max: 260 }).map((n) => 'k'.repeat(n)) },
)

const validItem = fc.oneof(
  fc.string({ minLength: 1, maxLength: 50 }),
  fc.constantFrom('{x}', '{x}{y}', 'a\u0000b', '"quoted"', 'é'),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 20 }),
)
const body = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({ item: validItem, qty: fc.integer({ min: 1, max: 5 }) }).map((b) => JSON.stringify(b)),
  },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      '',
      '{',
      '{"item":',
      '[]',
      'null',
      '"x"',
      '1',
      '{"item":"a","qty":0}',
      '{"item":"a"}',
      '{"item":"","qty":1}',
      '{"item":"a","qty":"1"}',
      '{"item":"a","qty":1,"extra":true}',
      '{"__proto__":{"x":1},"item":"a","qty":1}',
      '{"constructor":{"prototype":{"x":1}},"item":"a","qty":1}',
      `{"item":"${'i'.repeat(201)}","qty":1}`,
      `${'['.repeat(2_000)}${']'.repeat(2_000)}`,
      '{"item":"a","qty":1}{"item":"b","qty":1}',
      '{"item":"\\ud800","qty":1}',
    ),
  },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }) },
  { weight: 1, arbitrary: fc.json({ maxDepth: 4 }) },
)

const cases = fc.record({
  keys: fc.oneof(
    { weight: 1, arbitrary: fc.constant([] as string[]) },
    { weight: 12, arbitrary: keyValue.map((k) => [k]) },
    { weight: 1, arbitrary: fc.tuple(keyValue, keyValue).map(([a, b]) => [a, b]) },
  ),
  auth: fc.oneof(
    { weight: 12, arbitrary: fc.constantFrom('Bearer fuzz-a', 'Bearer fuzz-b') },
    { weight: 1, arbitrary: fc.constantFrom(undefined, 'Bearer ', 'Basic abc', 'Bearer a{x}b') },
  ),
  contentType: fc.oneof(
    {
      weight: 8,
      arbitrary: fc.constantFrom('application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON'),
    },
    { weight: 1, arbitrary: fc.constantFrom('text/plain', 'application/x-www-form-urlencoded', undefined) },
  ),
  body,
})

/** Header values go on the wire as UTF-8 bytes, CR and LF included. */
function toWire(index: number, c: Case): Buffer {
  const lines = [Buffer.from('Host: 127.0.0.1'), Buffer.from(`X-Case: ${index}`)]
  for (const key of c.keys) lines.push(Buffer.concat([Buffer.from('Idempotency-Key: '), Buffer.from(key, 'utf8')]))
  if (c.auth !== undefined) lines.push(Buffer.from(`Authorization: ${c.auth}`))
  if (c.contentType !== undefined) lines.push(Buffer.from(`Content-Type: ${c.contentType}`))
  return buildRequest('POST /orders HTTP/1.1', lines, Buffer.from(c.body, 'utf8'))
}

describe('fault 10: bad input over raw sockets', () => {
  let redis: FaultRedis
  let admin: Redis
  let app: AppProcess
  let log: ExecutionLog

  beforeAll(async () => {
    redis = await startFaultRedis()
    admin = redis.admin()
    log = createExecutionLog()
    app = await startFaultApp({ REDIS_URL: redis.url, EXECUTION_LOG: log.path })
  })

  afterAll(async () => {
    await app.stop()
    await redis.stop()
    log.remove()
  })

  it(`answers ${CASES} generated requests without a 5xx, runs nothing it rejected, and stores only digest keys`, async (context) => {
    const generated: Case[] = fc.sample(cases, { seed: SEED, numRuns: CASES })
    // Over the 1 MiB body limit: a few, sent like the rest.
    generated.splice(
      0,
      3,
      ...[1, 2, 3].map((n) => ({
        keys: [`huge-${n}`],
        auth: 'Bearer fuzz-a',
        contentType: 'application/json',
        body: JSON.stringify({ item: 'h'.repeat(1_100_000 * n), qty: 1 }),
      })),
    )
    const port = Number(new URL(app.url).port)
    const answers: RawAnswer[] = new Array(generated.length)

    // The bodies over the limit first, one at a time, head before body (see rawRequest).
    for (const index of [0, 1, 2])
      answers[index] = await rawRequest(port, toWire(index, generated[index] as Case), 10_000, true)
    let next = 3
    await Promise.all(
      Array.from({ length: PARALLEL }, async () => {
        while (next < generated.length) {
          const index = next++
          answers[index] = await rawRequest(port, toWire(index, generated[index] as Case))
        }
      }),
    )
    const alive = await fetch(`${app.url}/_status`).then((r) => r.status)
    const executed = new Set(log.executions().map((e) => Number(e.case)))
    const fresh = new Set(
      answers.flatMap((a, i) => (a.status === 201 && a.headers['idempotent-replayed'] !== 'true' ? [i] : [])),
    )
    const rejectedButRun = [...executed].filter((i) => !fresh.has(i))
    const keys: string[] = []
    let cursor = '0'
    do {
      const [nextCursor, batch] = await admin.scan(cursor, 'COUNT', 1000)
      cursor = nextCursor
      keys.push(...batch)
    } while (cursor !== '0')
    const foreign = keys.filter((key) => !RECORD_KEY_SHAPE.test(key))
    const codes = answers.map((a) => (a.status >= 400 ? `${a.status}${problemCode(a)}` : String(a.status)))

    recordFigures(context, '10', 'bad input over raw sockets', {
      'requests (fast-check seed)': `${generated.length} (seed ${SEED})`,
      'answers by status': tally(answers.map((a) => a.status)),
      'layer problems': tally(codes.filter((c) => c.includes('IDEMPOTENCY'))),
      '5xx': answers.filter((a) => a.status >= 500).length,
      'closed without an answer': answers.filter((a) => a.status === 0).length,
      'handler executions / fresh 201': `${executed.size} / ${fresh.size}`,
      'executions of rejected requests': rejectedButRun.length,
      'keys in Redis (digest-shaped)': `${keys.length} (${keys.length - foreign.length})`,
      'app alive afterwards': alive === 200,
    })
    const serverErrors = answers.flatMap((a, i) => (a.status >= 500 ? [{ case: generated[i], answer: a.body }] : []))
    expect(serverErrors).toEqual([])
    expect(answers.filter((a) => a.status === 0)).toHaveLength(0)
    expect(rejectedButRun).toEqual([])
    expect(executed.size).toBe(fresh.size)
    expect(fresh.size).toBeGreaterThan(1_000)
    expect(foreign).toEqual([])
    expect(keys.length).toBeGreaterThan(0)
    expect(alive).toBe(200)
  })
})

function problemCode(answer: RawAnswer): string {
  if (!(answer.headers['content-type'] ?? '').startsWith('application/problem+json')) return ''
  try {
    return ` ${(JSON.parse(answer.body) as { code?: string }).code ?? ''}`
  } catch {
    return ''
  }
}
