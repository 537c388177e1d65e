/**
 * The fault app (test/faults/apps/fault-app.ts) on NestJS, for the faults that run on every
 * adapter: the idempotency module on the Redis store, on platform-express or, with
 * NEST_PLATFORM=fastify, platform-fastify. Every handler execution is appended to EXECUTION_LOG
 * (one JSON line, written before the handler does anything else).
 *
 * Env: PORT, HOST, NEST_PLATFORM, REDIS_URL (or REDIS_CLUSTER, REDIS_SENTINELS: see common.ts),
 * IDEMPOTENCY_SECRET, IDEMPOTENCY_LEASE_MS,
 * IDEMPOTENCY_FAILURE_RETENTION_MS, IDEMPOTENCY_CLAIM_TIMEOUT_MS, IDEMPOTENCY_WAIT_MS,
 * REDIS_COMMAND_TIMEOUT_MS (2000), EXECUTION_LOG, UNSAFE_EVICTION ('refuse' | 'warn'),
 * VERIFY_AT_STARTUP ('0' to skip `store.verify()`), EXTRA_DELAY_MS (0).
 *
 * Routes: POST /orders (expiredExecution 'recover'), POST /orders-takeover ('takeover'), both
 * with `{ item, qty, delayMs?, fail?, pad? }`; GET /orders; GET /_status (no auth).
 */
import 'reflect-metadata'
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
import type { Cluster, Redis } from 'ioredis'
import {
  type IdempotencyInfo,
  IdempotencyModule,
  Idempotent,
  IdempotencyInfo as Info,
} from '../../../plugins/nestjs/index.js'
import { env, idempotencyOptionsFromEnv, isOrder, type OrderBody, placeOrder, redisFromEnv } from './common.js'

/** `{ item, qty, delayMs?, fail?, pad? }`, as the Fastify app's schema. */
class OrderPipe implements PipeTransform {
  transform(body: unknown): OrderBody {
    if (!isOrder(body)) throw new BadRequestException('invalid body')
    return body
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

function order(url: string, body: OrderBody, info: IdempotencyInfo | null, key?: string, user?: string) {
  return placeOrder(body, { route: url, key, user, token: info?.fencingToken ?? 0 })
}

@Controller()
class FaultController {
  constructor(@Inject(REDIS) private readonly redis: Redis | Cluster) {}

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
  const { redis, store } = await redisFromEnv((event) =>
    process.stderr.write(`${JSON.stringify({ level: 40, idempotency: event })}\n`),
  )

  @Module({
    imports: [
      IdempotencyModule.forRoot<Authenticated>({
        store,
        ...idempotencyOptionsFromEnv(),
        principal: (request) => request.user,
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
