/**
 * The example API on NestJS: the same routes, bodies, statuses, headers and environment
 * variables as the Fastify and Express examples, so examples/requests.sh runs against it too,
 * on either Nest platform.
 *
 *   npm run example:nest                          # platform-express, in-memory store
 *   NEST_PLATFORM=fastify npm run example:nest    # platform-fastify
 *   REDIS_URL=redis://127.0.0.1:6379 npm run example:nest
 *
 * Env: NEST_PLATFORM (express | fastify), PORT (3000), HOST (127.0.0.1), REDIS_URL or
 * DATABASE_URL, IDEMPOTENCY_SECRET, IDEMPOTENCY_LEASE_MS (30000), IDEMPOTENCY_WAIT_MS (unset: 409
 * for a duplicate still running).
 * `Authorization: Bearer <name>` makes <name> the principal; without it every route answers 401.
 * `GET /openapi.json` is the API's OpenAPI document (@nestjs/swagger), each protected route with its
 * Idempotency-Key header and the layer's answers (`@ApiIdempotent()`, docs/openapi.md).
 */
import 'reflect-metadata'
import { STATUS_CODES } from 'node:http'
import { pathToFileURL } from 'node:url'
import {
  type ArgumentsHost,
  Body,
  type CanActivate,
  Catch,
  Controller,
  createParamDecorator,
  type DynamicModule,
  type ExceptionFilter,
  type ExecutionContext,
  Get,
  HttpException,
  type INestApplication,
  Inject,
  Param,
  Post,
  Res,
  ValidationPipe,
} from '@nestjs/common'
import { APP_FILTER, APP_GUARD, HttpAdapterHost, NestFactory } from '@nestjs/core'
import { ExpressAdapter } from '@nestjs/platform-express'
import { FastifyAdapter } from '@nestjs/platform-fastify'
import { ApiParam, DocumentBuilder, SwaggerModule } from '@nestjs/swagger'
import { IsIn, IsInt, IsOptional, IsString, Length, Matches, Max, Min } from 'class-validator'
import {
  type IdempotencyInfo,
  IdempotencyModule,
  type IdempotencyStore,
  Idempotent,
  IdempotencyInfo as Info,
} from '../plugins/nestjs/index.js'
import { ApiIdempotent } from '../plugins/nestjs/swagger.js'
import { exampleEnvironment } from './environment.js'
import { Ledger } from './ledger.js'
import { type LoggerOption, lineLogger, lineSettings } from './line-logger.js'
import { Shop } from './shop.js'

export type NestPlatform = 'express' | 'fastify'

export interface NestExampleOptions {
  readonly store: IdempotencyStore
  readonly secret: string
  /** @default 'express' */
  readonly platform?: NestPlatform
  readonly leaseMs?: number
  /** Duplicates of a request still running wait this long for its answer (unset: 409 at once). */
  readonly waitMs?: number
  /** `true`: JSON log lines on stdout; `{ stream, level }`: JSON lines written to `stream`. */
  readonly logger?: LoggerOption
  /** Balances in PostgreSQL (with the PostgreSQL store): deposits then run in the layer's transaction. */
  readonly ledger?: Ledger
}

/** `POST /orders` body: `{ item, qty, delayMs?, fail? }`, nothing else. */
class OrderDto {
  @IsString() @Length(1, 200) item!: string
  @IsInt() @Min(1) qty!: number
  @IsOptional() @IsInt() @Min(0) @Max(30_000) delayMs?: number
  @IsOptional() @IsIn(['retryable', 'unknown']) fail?: 'retryable' | 'unknown'
}

class DepositDto {
  @IsInt() @Min(1) amount!: number
}

class AccountParams {
  @Matches(/^[A-Za-z0-9_-]{1,64}$/) id!: string
}

/**
 * Validation as a pipe per parameter. The expected type is given, because tsx (esbuild) emits
 * no decorator metadata; `forbidNonWhitelisted` refuses unknown members, like the other
 * examples' schemas.
 */
const valid = (expectedType: new () => object) =>
  new ValidationPipe({ transform: true, whitelist: true, forbidNonWhitelisted: true, expectedType })

const SHOP = Symbol('shop')
const LEDGER = Symbol('ledger')

type Authenticated = { user: string; headers: Record<string, string | string[] | undefined> }

/** Authentication first: a guard runs before the idempotency layer claims anything. */
class BearerGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<Authenticated>()
    const match = /^Bearer ([A-Za-z0-9._~+/-]{1,64})$/.exec(String(request.headers.authorization ?? ''))
    if (!match) throw new UnauthenticatedError()
    request.user = match[1] as string
    return true
  }
}

class UnauthenticatedError extends Error {}

/** The authenticated caller (set by BearerGuard). */
const User = createParamDecorator(
  (_data: unknown, context: ExecutionContext) => context.switchToHttp().getRequest<Authenticated>().user,
)

// Every @Idempotent() route of the controller documented; GET /orders left as it is.
@ApiIdempotent()
@Controller()
class OrdersController {
  constructor(
    @Inject(SHOP) private readonly shop: Shop,
    @Inject(HttpAdapterHost) private readonly host: HttpAdapterHost,
  ) {}

  @Post('orders')
  @Idempotent()
  async create(
    @Body(valid(OrderDto)) body: OrderDto,
    @Info() idempotency: IdempotencyInfo | null,
    @User() user: string,
    @Res({ passthrough: true }) response: unknown,
  ) {
    const order = await this.shop.createOrder(user, body, idempotency)
    this.host.httpAdapter.setHeader(response, 'location', `/orders/${order.id}`)
    return order
  }

  @Get('orders')
  list(@User() user: string) {
    return { orders: this.shop.ordersOf(user) }
  }
}

// Named for the document: a validated params object does not name its members to @nestjs/swagger.
@ApiParam({ name: 'id', type: String })
@Controller('accounts')
class AccountsController {
  constructor(
    @Inject(SHOP) private readonly shop: Shop,
    @Inject(LEDGER) private readonly ledger: Ledger | undefined,
  ) {}

  // One route documented: above @Post() (its status, 201) and @Idempotent() (its options).
  @ApiIdempotent()
  @Post(':id/deposits')
  @Idempotent()
  deposit(
    @Param(valid(AccountParams)) params: AccountParams,
    @Body(valid(DepositDto)) body: DepositDto,
    @Info() idempotency: IdempotencyInfo | null,
    @User() user: string,
  ) {
    return this.shop.deposit(user, params.id, body.amount, idempotency)
  }

  @Get(':id')
  async balance(@Param('id') accountId: string, @User() user: string) {
    const balance = this.ledger ? await this.ledger.balanceOf(user, accountId) : this.shop.balanceOf(user, accountId)
    return { accountId, balance }
  }
}

/** On PostgreSQL the deposit and its stored answer commit in one transaction. */
@ApiIdempotent()
@ApiParam({ name: 'id', type: String })
@Controller('accounts')
class LedgerDepositsController {
  constructor(@Inject(LEDGER) private readonly ledger: Ledger) {}

  @Post(':id/deposits')
  @Idempotent({ transaction: true })
  deposit(
    @Param(valid(AccountParams)) params: AccountParams,
    @Body(valid(DepositDto)) body: DepositDto,
    @Info() idempotency: IdempotencyInfo | null,
    @User() user: string,
  ) {
    return this.ledger.deposit(idempotency?.db as never, user, params.id, body.amount)
  }
}

/**
 * Errors as JSON, like Fastify's default (`{ statusCode, code?, error, message }`), Nest's
 * HttpExceptions as Nest sends them, and the 401 as problem+json, as in the other examples.
 */
@Catch()
class ErrorFilter implements ExceptionFilter {
  constructor(@Inject(HttpAdapterHost) private readonly host: HttpAdapterHost) {}

  catch(error: unknown, context: ArgumentsHost): void {
    const adapter = this.host.httpAdapter
    const response = context.switchToHttp().getResponse()
    if (error instanceof UnauthenticatedError) {
      adapter.setHeader(response, 'content-type', 'application/problem+json; charset=utf-8')
      adapter.setHeader(response, 'www-authenticate', 'Bearer')
      const body = {
        type: 'about:blank',
        title: 'Unauthorized',
        status: 401,
        detail: 'Send Authorization: Bearer <name>.',
      }
      adapter.reply(response, JSON.stringify(body), 401)
      return
    }
    if (error instanceof HttpException) {
      adapter.reply(response, error.getResponse(), error.getStatus())
      return
    }
    const { statusCode, code, message } = error as { statusCode?: unknown; code?: unknown; message?: unknown }
    const candidate = Number(statusCode)
    const status = Number.isInteger(candidate) && candidate >= 400 && candidate <= 599 ? candidate : 500
    const body = {
      statusCode: status,
      ...(typeof code === 'string' ? { code } : {}),
      error: STATUS_CODES[status] ?? 'Error',
      message: typeof message === 'string' ? message : 'Error',
    }
    adapter.reply(response, body, status)
  }
}

function appModule(options: NestExampleOptions): DynamicModule {
  const ledger = options.ledger
  return {
    module: class ExampleModule {},
    imports: [
      IdempotencyModule.forRoot<Authenticated>({
        store: options.store,
        secrets: { current: 1, keys: { 1: options.secret } },
        principal: (request) => request.user,
        leaseMs: options.leaseMs,
        inFlight: options.waitMs ? { waitMs: options.waitMs } : undefined,
      }),
    ],
    controllers: ledger
      ? [OrdersController, LedgerDepositsController, AccountsController]
      : [OrdersController, AccountsController],
    providers: [
      { provide: SHOP, useValue: new Shop() },
      { provide: LEDGER, useValue: ledger },
      { provide: APP_GUARD, useClass: BearerGuard },
      { provide: APP_FILTER, useClass: ErrorFilter },
    ],
  }
}

/** Builds the example app and initialises it (not listening): `await app.listen(port, host)`. */
export async function buildNestExampleApp(options: NestExampleOptions): Promise<INestApplication> {
  const logger = options.logger ?? false
  const lines = lineSettings(logger)
  const adapter =
    options.platform === 'fastify'
      ? new FastifyAdapter({ logger: lines === undefined ? false : { level: lines.level, stream: lines.stream } })
      : new ExpressAdapter()
  const app = await NestFactory.create(appModule(options), adapter, {
    logger: logger === false ? false : ['warn', 'error'],
  })
  if (options.platform !== 'fastify' && lines !== undefined) {
    // A pino-shaped `req.log` on Express, as the Express example has: the layer logs through it.
    const log = lineLogger(lines.stream, lines.level)
    app.use((req: { log?: unknown }, _res: unknown, next: () => void) => {
      req.log = log
      next()
    })
  }
  const document = SwaggerModule.createDocument(
    app,
    new DocumentBuilder().setTitle('idemkit example: orders').setVersion('1.0.0').addBearerAuth().build(),
  )
  // Outside the controllers, so the BearerGuard does not ask for a token.
  const http = app.getHttpAdapter()
  http.get('/openapi.json', (_request: unknown, response: unknown) => http.reply(response, document, 200))
  await app.init()
  return app
}

async function main(): Promise<void> {
  const env = await exampleEnvironment()
  const log = lineLogger(process.stdout, 'info')
  const ledger = env.pool ? new Ledger(env.pool) : undefined
  await ledger?.migrate()
  const platform: NestPlatform = process.env.NEST_PLATFORM === 'fastify' ? 'fastify' : 'express'
  const app = await buildNestExampleApp({
    store: env.store,
    secret: env.secret,
    platform,
    leaseMs: env.leaseMs,
    waitMs: env.waitMs,
    logger: true,
    ledger,
  })
  for (const warning of env.warnings) log.warn({}, warning)
  app.enableShutdownHooks()
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      void app
        .close()
        .then(() => env.close())
        .then(() => process.exit(0))
    })
  }
  await app.listen(env.port, env.host)
  log.info({ platform }, `Server listening at http://${env.host}:${env.port}`)
  log.info({}, env.cliHint)
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((error) => {
    console.error(error)
    process.exit(1)
  })
}
