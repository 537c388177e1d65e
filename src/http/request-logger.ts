/**
 * The logger of an adapter whose framework has none of its own (Express, Hono): the pino-style
 * logger the app put on the request when there is one (pino-http's `req.log`, hono-pino's
 * `c.var.logger`), else the console, for warnings and errors only.
 */
import type { GuardLogger } from './guard.js'

const CONSOLE_LOGGER: GuardLogger = {
  info() {},
  warn(object, message) {
    console.warn(message, object)
  },
  error(object, message) {
    console.error(message, object)
  },
}

/** `candidate` when it has pino's `info`, `warn` and `error`; else `undefined`. */
export function pinoLogger(candidate: unknown): GuardLogger | undefined {
  const log = candidate as Partial<GuardLogger> | null | undefined
  if (
    log !== undefined &&
    log !== null &&
    typeof log.info === 'function' &&
    typeof log.warn === 'function' &&
    typeof log.error === 'function'
  ) {
    return log as GuardLogger
  }
  return undefined
}

/** `candidate` when it is a pino-style logger; else the console logger. */
export function requestLogger(candidate: unknown): GuardLogger {
  return pinoLogger(candidate) ?? CONSOLE_LOGGER
}
