/**
 * The fault app (test/faults/apps/fault-app.ts) on NestJS, for the faults that run on every
 * adapter: the idempotency module on the Redis store, on platform-express or, with
 * NEST_PLATFORM=fastify, platform-fastify. Every handler execution is appended to EXECUTION_LOG
 * (one JSON line, written before the handler does anything else).
 *
 * Env: PORT, HOST, NEST_PLATFORM, REDIS_URL, IDEMPOTENCY_SECRET, IDEMPOTENCY_LEASE_MS,
 * IDEMPOTENCY_FAILURE_RETENTION_MS, IDEMPOTENCY_CLAIM_TIMEOUT_MS, IDEMPOTENCY_WAIT_MS,
 * REDIS_COMMAND_TIMEOUT_MS (2000), EXECUTION_LOG, UNSAFE_EVICTION ('refuse' | 'warn'),
 * VERIFY_AT_STARTUP ('0' to skip `store.verify()`), EXTRA_DELAY_MS (0).
 *
 * Routes: POST /orders (expiredExecution 'recover'), POST /orders-takeover ('takeover'), both
 * with `{ item, qty, delayMs?, fail?, pad? }`; GET /orders; GET /_status (no auth).
 */
import 'reflect-metadata'
import { randomUUID } from 'node:crypto'
import { appendFileSync } from 'node:fs'
import {
  type ArgumentsHost,
  BadRequestException,
  Body,
  type CanActivate,
  Catch,
  Controller,
  type ExceptionFilter,
  type ExecutionContext,
  Get,
  Headers,
  HttpException,
  Inject,
  Module,
  type PipeTransform,
  Post,
  Req,
  UnauthorizedException,
} from '@nestjs/common'
import { APP_FILTER, APP_GUARD, HttpAdapterHost, NestFactory } from '@nestjs/core'
import { ExpressAdapter } from '@nestjs/platform-express'
import { FastifyAdapter } from '@nestjs/platform-fastify'
import { Redis } from 'ioredis'
import {
  type IdempotencyInfo,
  IdempotencyModule,
  Idempotent,
  IdempotencyInfo as Info,
  redisStore,
} from '../../../plugins/nestjs/index.js'

interface OrderBody {
  item: string
  qty: number
  delayMs?: number
  fail?: 'retryable' | 'unknown'
}

class RetryableError extends Error {
  readonly statusCode = 503
  readonly retryable = true
}

const env = process.env
const executionLog = env.EXECUTION_LOG
if (!executionLog) throw new Error('EXECUTION_LOG is required')

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const optionalNumber = (value: string | undefined) => (value ? Number(value) : undefined)

function record(line: object): void {
  appendFileSync(executionLog as string, `${JSON.stringify(line)}\n`)
}

/** `{ item, qty, delayMs?, fail?, pad? }`, as the Fastify app's schema. */
class OrderPipe implements PipeTransform {
  transform(body: unknown): OrderBody {
    if (typeof body !== 'object' || body === null) throw new BadRequestException('invalid body')
    const { item, qty, delayMs, fail, ...rest } = body as Record<string, unknown>
    const valid =
      Object.keys(rest).every((name) => name === 'pad') &&
      typeof item === 'string' &&
      Number.isSafeInteger(qty) &&
      (delayMs === undefined || (Number.isSafeInteger(delayMs) && (delayMs as number) <= 30_000)) &&
      (fail === undefined || fail === 'retryable' || fail === 'unknown')
    if (!valid) throw new BadRequestException('invalid body')
    return body as OrderBody
  }
}

type Authenticated = { user?: string; url: string; headers: Record<string, string | undefined> }

class BearerGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<Authenticated>()
    if (request.url === '/_status') return true
    const match = /^Bearer ([A-Za-z0-9._~+/-]{1,64})$/.exec(request.headers.authorization ?? '')
    if (!match) throw new UnauthorizedException('Send Authorization: Bearer <name>.')
    request.user = match[1] as string
    return true
  }
}

@Catch()
class ErrorFilter implements ExceptionFilter {
  constructor(@Inject(HttpAdapterHost) private readonly host: HttpAdapterHost) {}

  catch(error: Error, context: ArgumentsHost): void {
    const status =
      error instanceof HttpException ? error.getStatus() : ((error as { statusCode?: number }).statusCode ?? 500)
    const response = context.switchToHttp().getResponse()
    this.host.httpAdapter.reply(response, { statusCode: status, message: error.message }, status)
  }
}

const REDIS = Symbol('redis')

async function order(url: string, body: OrderBody, info: IdempotencyInfo | null, key?: string, user?: string) {
  const { item, qty, delayMs = 0, fail } = body
  const token = info?.fencingToken ?? 0
  record({ type: 'execution', route: url, key, user, pid: process.pid, token })
  const delay = delayMs + Number(env.EXTRA_DELAY_MS ?? 0)
  if (delay > 0) await sleep(delay)
  if (fail === 'retryable') throw new RetryableError('busy; nothing was done')
  if (fail === 'unknown') throw new Error('failed; the effect is unknown')
  return { id: randomUUID(), item, qty, token, pid: process.pid }
}

@Controller()
class FaultController {
  constructor(@Inject(REDIS) private readonly redis: Redis) {}

  @Post('orders')
  @Idempotent({ expiredExecution: 'recover' })
  orders(
    @Body(new OrderPipe()) body: OrderBody,
    @Info() info: IdempotencyInfo | null,
    @Headers('idempotency-key') key: string,
    @Req() request: Authenticated,
  ) {
    return order('/orders', body, info, key, request.user)
  }

  @Post('orders-takeover')
  @Idempotent({ expiredExecution: 'takeover' })
  takeover(
    @Body(new OrderPipe()) body: OrderBody,
    @Info() info: IdempotencyInfo | null,
    @Headers('idempotency-key') key: string,
    @Req() request: Authenticated,
  ) {
    return order('/orders-takeover', body, info, key, request.user)
  }

  @Get('orders')
  list() {
    return { ok: true }
  }

  @Get('_status')
  status() {
    return { redis: this.redis.status }
  }
}

async function main(): Promise<void> {
  const redis = new Redis(env.REDIS_URL as string, {
    commandTimeout: Number(env.REDIS_COMMAND_TIMEOUT_MS ?? 2_000),
    maxRetriesPerRequest: 1,
    autoResendUnfulfilledCommands: false,
  })
  redis.on('error', () => {})
  await new Promise<void>((resolve, reject) => {
    redis.once('ready', resolve)
    setTimeout(() => reject(new Error('Redis did not become ready within 20 s')), 20_000).unref()
  })
  const store = redisStore({
    redis,
    unsafeEviction: env.UNSAFE_EVICTION === 'warn' ? 'warn' : 'refuse',
    onEvent: (event) => process.stderr.write(`${JSON.stringify({ level: 40, idempotency: event })}\n`),
  })
  if (env.VERIFY_AT_STARTUP !== '0') await store.verify()

  @Module({
    imports: [
      IdempotencyModule.forRoot<Authenticated>({
        store,
        secrets: { current: 1, keys: { 1: env.IDEMPOTENCY_SECRET as string } },
        principal: (request) => request.user,
        leaseMs: optionalNumber(env.IDEMPOTENCY_LEASE_MS),
        failureRetentionMs: optionalNumber(env.IDEMPOTENCY_FAILURE_RETENTION_MS),
        claimTimeoutMs: optionalNumber(env.IDEMPOTENCY_CLAIM_TIMEOUT_MS),
        inFlight: env.IDEMPOTENCY_WAIT_MS ? { waitMs: Number(env.IDEMPOTENCY_WAIT_MS) } : undefined,
      }),
    ],
    controllers: [FaultController],
    providers: [
      { provide: REDIS, useValue: redis },
      { provide: APP_GUARD, useClass: BearerGuard },
      { provide: APP_FILTER, useClass: ErrorFilter },
    ],
  })
  class FaultModule {}

  const adapter = env.NEST_PLATFORM === 'fastify' ? new FastifyAdapter() : new ExpressAdapter()
  const app = await NestFactory.create(FaultModule, adapter, { logger: ['warn', 'error'] })
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      void app
        .close()
        .then(() => store.close())
        .then(() => {
          redis.disconnect()
          process.exit(0)
        })
    })
  }
  await app.listen(Number(env.PORT), env.HOST ?? '127.0.0.1')
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
