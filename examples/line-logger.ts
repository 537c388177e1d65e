/**
 * Logging for the example apps whose framework has no logger of its own (Express, Hono, NestJS
 * on Express): JSON lines in pino's shape, so the examples need no logging library; and the
 * store's startup report, which the Fastify plugin logs itself.
 */
import type { Writable } from 'node:stream'
import type { IdempotencyStore } from '../src/index.js'

/** A pino-shaped logger: the idempotency layer logs through one it finds on the request. */
export interface LineLogger {
  info(object: object, message: string): void
  warn(object: object, message: string): void
  error(object: object, message: string): void
}

/** An example's `logger` option: `true`, JSON lines on stdout; `{ stream, level }`: to `stream`. */
export type LoggerOption = boolean | { readonly stream?: Writable; readonly level?: string }

const LEVELS: Readonly<Record<string, number>> = { debug: 20, info: 30, warn: 40, error: 50 }

/** JSON lines on `stream`, from `level` up. */
export function lineLogger(stream: Writable, level: string): LineLogger {
  const threshold = LEVELS[level] ?? LEVELS.info ?? 30
  const write = (at: number) => (object: object, msg: string) => {
    if (at >= threshold) stream.write(`${JSON.stringify({ level: at, time: Date.now(), ...object, msg })}\n`)
  }
  return { info: write(30), warn: write(40), error: write(50) }
}

/** Where the `logger` option writes, and from which level; `undefined` when logging is off. */
export function lineSettings(option: LoggerOption | undefined): { stream: Writable; level: string } | undefined {
  if (option === undefined || option === false) return undefined
  if (option === true) return { stream: process.stdout, level: 'info' }
  return { stream: option.stream ?? process.stdout, level: option.level ?? 'info' }
}

/** The logger the `logger` option asks for; `undefined` when logging is off. */
export function optionLogger(option: LoggerOption | undefined): LineLogger | undefined {
  const settings = lineSettings(option)
  return settings === undefined ? undefined : lineLogger(settings.stream, settings.level)
}

/** The startup report: what the store runs on, and one warning line per risk it found. */
export function logStartupReport(store: IdempotencyStore, log: LineLogger): void {
  store.describe?.().then(
    (report) => {
      log.info({ idempotency: report }, 'idempotency store ready')
      for (const warning of report.warnings)
        log.warn({ idempotency: { store: report.store } }, `idempotency store: ${warning}`)
    },
    (error: unknown) => log.warn({ err: String(error) }, 'idempotency store not reachable at startup'),
  )
}
