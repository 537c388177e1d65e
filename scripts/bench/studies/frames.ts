/**
 * `npx tsx scripts/bench/studies/frames.ts`: what writing one command costs the client, ioredis's own
 * way against the store's one frame (src/stores/redis/framed.ts): a claim's `SET` with its
 * record as bytes, the same with the record as text (ioredis's string path), and the store's
 * frame of it. Nanoseconds per command, the Command built and written, medians of 5 runs. No
 * server: nothing is sent. Each case runs in turn, five times over. Nothing here asserts a timing:
 * it prints figures.
 */
import { Command } from 'ioredis'
import { ensureBuilt } from '../common.js'

ensureBuilt()
const { framedCommandClass } = (await import(
  new URL('../../../dist/src/stores/redis/framed.js', import.meta.url).href
)) as typeof import('../../../src/stores/redis/framed.js')
const FramedCommand = framedCommandClass()

const record = Buffer.alloc(260, 7)
const recordText = 'x'.repeat(260)
const key = `idemkit:idem:1:d1${'0'.repeat(32)}:POST /orders:${'k'.repeat(20)}`
const N = 300_000
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number
function once(write: () => unknown): number {
  const started = process.hrtime.bigint()
  for (let i = 0; i < N; i++) write()
  return Number(process.hrtime.bigint() - started) / N
}
const args = (value: string | Buffer) => [key, value, 'PX', '89999', 'NX', 'GET']
const cases: [string, () => unknown][] = [
  ['ioredis, the record as bytes (mixed buffers)', () => new Command('set', args(record)).toWritable({})],
  ['ioredis, the record as text', () => new Command('set', args(recordText)).toWritable({})],
  ['one frame, the record as bytes', () => new FramedCommand('set', args(record)).toWritable({})],
]
for (const [, write] of cases) once(write) // warm up
const runs = cases.map((): number[] => [])
for (let round = 0; round < 5; round++) {
  cases.forEach(([, write], i) => {
    runs[i]?.push(once(write))
  })
}
cases.forEach(([label], i) => {
  console.log(
    `${label.padEnd(48)} ${median(runs[i] as number[])
      .toFixed(0)
      .padStart(6)} ns per SET`,
  )
})
