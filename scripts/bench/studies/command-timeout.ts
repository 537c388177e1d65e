/**
 * `npx tsx scripts/bench/studies/command-timeout.ts`: what ioredis's `commandTimeout` costs the
 * client per command. ioredis arms a `setTimeout` for every command sent with it (`Redis.sendCommand`
 * → `Command.setTimeout`) and clears it on the reply; the store's calls go through the same
 * `sendCommand`. Two clients on one redis-server started here: the one README.md and
 * docs/stores.md tell users to make (`commandTimeout: 2000, maxRetriesPerRequest: 1,
 * autoResendUnfulfilledCommands: false`) and the same without `commandTimeout` (and with
 * `autoResendUnfulfilledCommands` at its default, which the store requires without a timeout).
 * Each sends batches of 32 concurrent `GET`s (as 32 connections' requests would), in turns, 7
 * rounds of 100,000 commands: this process's CPU µs per command (user + system), and the
 * difference round by round. Nothing here asserts a timing: it prints figures.
 */
import { Redis, type RedisOptions } from 'ioredis'
import { startRedisServer } from '../../redis-server.js'
import { median } from '../common.js'

const COMMANDS = Number(process.env.N ?? 100_000)
const ROUNDS = 7
const BATCH = 32

const server = await startRedisServer()
const clients: [string, RedisOptions][] = [
  [
    'documented (commandTimeout 2000)',
    { commandTimeout: 2000, maxRetriesPerRequest: 1, autoResendUnfulfilledCommands: false },
  ],
  ['without commandTimeout', { maxRetriesPerRequest: 1 }],
]
try {
  const connected = await Promise.all(
    clients.map(async ([name, options]) => {
      const redis = new Redis(server.url, options)
      await new Promise((resolve) => redis.once('ready', resolve))
      return { name, redis }
    }),
  )
  await connected[0]?.redis.set('k', 'v'.repeat(200))
  const run = async (redis: Redis, commands: number): Promise<number> => {
    const before = process.cpuUsage()
    for (let sent = 0; sent < commands; sent += BATCH) {
      await Promise.all(Array.from({ length: BATCH }, () => redis.get('k')))
    }
    const used = process.cpuUsage(before)
    return (used.user + used.system) / commands
  }
  for (const { redis } of connected) await run(redis, 20_000) // warm-up
  const perRound = connected.map((): number[] => [])
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, { redis }] of connected.entries()) perRound[i]?.push(await run(redis, COMMANDS))
  }
  console.log(`| client | CPU µs per GET, median of ${ROUNDS} rounds (lowest-highest) |`)
  console.log('| --- | ---: |')
  for (const [i, { name }] of connected.entries()) {
    const values = perRound[i] as number[]
    console.log(
      `| ${name} | ${median(values).toFixed(2)} (${Math.min(...values).toFixed(2)}-${Math.max(...values).toFixed(2)}) |`,
    )
  }
  const added = (perRound[0] as number[]).map((value, i) => value - ((perRound[1] as number[])[i] as number))
  console.log(
    `\ncommandTimeout adds ${median(added).toFixed(2)} µs per command (rounds ${Math.min(...added).toFixed(2)} to ${Math.max(...added).toFixed(2)}).`,
  )
  for (const { redis } of connected) redis.disconnect()
} finally {
  await server.stop()
}
