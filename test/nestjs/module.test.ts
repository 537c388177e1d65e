/**
 * The Nest module on both platforms over a listening server: the claim after guards and pipes,
 * the fingerprint of what the client sent (not of what a ValidationPipe made of it), Nest's
 * exceptions classified like any answer, the replacement answer, module options and startup.
 */
import 'reflect-metadata'
import { randomUUID } from 'node:crypto'
import type { ServerResponse } from 'node:http'
import {
  Body,
  type CanActivate,
  Controller,
  type ExecutionContext,
  Get,
  HttpCode,
  HttpException,
  type INestApplication,
  Injectable,
  type LoggerService,
  Module,
  Post,
  Req,
  Res,
  ServiceUnavailableException,
  UseGuards,
  ValidationPipe,
} from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import { ExpressAdapter } from '@nestjs/platform-express'
import { FastifyAdapter } from '@nestjs/platform-fastify'
import { Transform } from 'class-transformer'
import { IsInt, IsString, Min } from 'class-validator'
import { of } from 'rxjs'
import { afterEach, describe, expect, it } from 'vitest'
import {
  type IdempotencyInfo,
  IdempotencyModule,
  type IdempotencyStore,
  Idempotent,
  IdempotencyInfo as Info,
  memoryStore,
  type NestIdempotencyOptions,
} from '../../plugins/nestjs/index.js'
import { authHeaders, type RunningApp, send } from '../helpers/adapters.js'
import { SECRET } from '../helpers/example-app.js'
import { faultyStore } from '../helpers/faulty-store.js'

const secrets = { current: 1, keys: { 1: SECRET } }
const PLATFORMS = ['express', 'fastify'] as const

/** Counts how often each handler ran. */
const runs = new Map<string, number>()
const ran = (name: string) => runs.set(name, (runs.get(name) ?? 0) + 1)

class ItemDto {
  @IsString() item!: string
  /** The pipe turns `"2"` into 2: the handler sees a number, the fingerprint what was sent. */
  @Transform(({ value }) => (typeof value === 'string' ? Number(value) : value))
  @IsInt()
  @Min(1)
  qty!: number
}

@Injectable()
class DenyGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    return context.switchToHttp().getRequest().headers['x-deny'] === undefined
  }
}

@Controller()
class TestController {
  @Post('validated')
  @Idempotent()
  validated(
    @Body(new ValidationPipe({ transform: true, expectedType: ItemDto })) dto: ItemDto,
    @Req() request: { body: unknown },
  ) {
    ran('validated')
    return { dto, isDto: dto instanceof ItemDto, sent: request.body }
  }

  @Post('guarded')
  @UseGuards(DenyGuard)
  @Idempotent()
  guarded(@Info() idempotency: IdempotencyInfo | null) {
    ran('guarded')
    return { fencingToken: idempotency?.fencingToken, aborted: idempotency?.signal.aborted }
  }

  @Post('declined')
  @Idempotent()
  declined() {
    ran('declined')
    throw new HttpException({ declined: true, run: runs.get('declined') }, 402)
  }

  @Post('unavailable')
  @Idempotent()
  unavailable() {
    ran('unavailable')
    throw new ServiceUnavailableException('down')
  }

  @Post('observable')
  @HttpCode(200)
  @Idempotent()
  observable() {
    ran('observable')
    return of({ run: runs.get('observable') })
  }

  @Post('optional')
  @Idempotent({ required: false })
  optional(@Info() idempotency: IdempotencyInfo | null) {
    ran('optional')
    return { protected: idempotency !== null, run: runs.get('optional') }
  }

  @Post('destroyed')
  @Idempotent()
  destroyed(@Res() response: { raw?: ServerResponse } & ServerResponse) {
    ran('destroyed')
    ;(response.raw ?? response).destroy()
  }

  @Post('plain')
  plain(@Info() idempotency: IdempotencyInfo | null) {
    ran('plain')
    return { idempotency, run: runs.get('plain') }
  }

  @Get('orders')
  list() {
    return { orders: [] }
  }
}

const principal = (request: { headers: { authorization?: string } }) => request.headers.authorization

async function start(
  platform: (typeof PLATFORMS)[number],
  imports: unknown[],
  controllers: unknown[] = [TestController],
  logger: LoggerService | false = false,
): Promise<INestApplication> {
  @Module({ imports: imports as never[], controllers: controllers as never[], providers: [DenyGuard] })
  class TestModule {}
  const adapter = platform === 'fastify' ? new FastifyAdapter() : new ExpressAdapter()
  const app = await NestFactory.create(TestModule, adapter, { logger, abortOnError: false })
  await app.listen(0, '127.0.0.1')
  return app
}

function running(app: INestApplication): RunningApp {
  const address = app.getHttpServer().address() as { port: number }
  return { url: `http://127.0.0.1:${address.port}`, port: address.port, logs: [], close: () => app.close() }
}

describe.each(PLATFORMS)('IdempotencyModule on platform-%s', (platform) => {
  let app: INestApplication | undefined
  let store: IdempotencyStore

  afterEach(async () => {
    await app?.close()
    app = undefined
    runs.clear()
  })

  async function startWith(options: Partial<NestIdempotencyOptions> = {}) {
    store = options.store ?? memoryStore()
    app = await start(platform, [IdempotencyModule.forRoot({ store, secrets, principal, ...options })])
    const http = running(app)
    return (path: string, key: string | undefined, body: unknown = {}, extra: Record<string, string> = {}) =>
      send(http, 'POST', path, { headers: { ...authHeaders('alice', key), ...extra }, body })
  }

  it('fingerprints the body as sent, not as a ValidationPipe with transform: true rewrote it', async () => {
    const post = await startWith()
    const key = randomUUID()
    const sent = { item: 'book', qty: '2' }

    const first = await post('/validated', key, sent)
    const again = await post('/validated', key, sent)
    // The pipe would make the same DTO of it, but the client sent another body.
    const other = await post('/validated', key, { item: 'book', qty: 2 })

    expect(first.status).toBe(201)
    expect(first.json()).toEqual({ dto: { item: 'book', qty: 2 }, isDto: true, sent })
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(again.body.equals(first.body)).toBe(true)
    expect(other.status).toBe(422)
    expect(other.json().code).toBe('IDEMPOTENCY_KEY_REUSED')
    expect(runs.get('validated')).toBe(1)
  })

  it('holds no key when the ValidationPipe refuses the body: the corrected request runs', async () => {
    const post = await startWith()
    const key = randomUUID()

    const invalid = await post('/validated', key, { item: 'book', qty: '0' })
    const valid = await post('/validated', key, { item: 'book', qty: '3' })

    expect(invalid.status).toBe(400)
    expect(valid.status).toBe(201)
    expect(valid.headers.get('idempotent-replayed')).toBeNull()
    expect(runs.get('validated')).toBe(1)
  })

  it('holds no key when a guard refuses the request: a later request with the key runs', async () => {
    const post = await startWith()
    const key = randomUUID()

    const denied = await post('/guarded', key, {}, { 'x-deny': '1' })
    const allowed = await post('/guarded', key)
    const replay = await post('/guarded', key)

    expect(denied.status).toBe(403)
    expect(allowed.status).toBe(201)
    expect(allowed.headers.get('idempotent-replayed')).toBeNull()
    expect(allowed.json()).toEqual({ fencingToken: 1, aborted: false })
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(runs.get('guarded')).toBe(1)
  })

  it('stores a 4xx HttpException as the answer and replays its status and body', async () => {
    const post = await startWith()
    const key = randomUUID()

    const first = await post('/declined', key)
    const again = await post('/declined', key)

    expect(first.status).toBe(402)
    expect(first.json()).toEqual({ declined: true, run: 1 })
    expect(again.status).toBe(402)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(again.headers.get('content-type')).toBe(first.headers.get('content-type'))
    expect(again.body.equals(first.body)).toBe(true)
    expect(runs.get('declined')).toBe(1)
  })

  it('records a 5xx HttpException as an unknown effect: the retry answers 503 recovery-required', async () => {
    const post = await startWith()
    const key = randomUUID()

    const first = await post('/unavailable', key)
    const retry = await post('/unavailable', key)

    expect(first.status).toBe(503)
    expect(first.json()).toMatchObject({ statusCode: 503, message: 'down' })
    expect(retry.status).toBe(503)
    expect(retry.json().code).toBe('IDEMPOTENCY_RECOVERY_REQUIRED')
    expect(runs.get('unavailable')).toBe(1)
  })

  it('stores what an Observable handler emits and replays it', async () => {
    const post = await startWith()
    const key = randomUUID()

    const first = await post('/observable', key)
    const again = await post('/observable', key)

    expect(first.status).toBe(200)
    expect(first.json()).toEqual({ run: 1 })
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(again.json()).toEqual({ run: 1 })
    expect(runs.get('observable')).toBe(1)
  })

  it('runs a route without the decorator as without the module, and gives it a null IdempotencyInfo', async () => {
    const post = await startWith()
    const key = randomUUID()

    const first = await post('/plain', key)
    const second = await post('/plain', key)

    expect(first.json()).toEqual({ idempotency: null, run: 1 })
    expect(second.json()).toEqual({ idempotency: null, run: 2 })
    expect(second.headers.get('idempotent-replayed')).toBeNull()
  })

  it('lets a request without a key through unprotected on a route where the key is optional', async () => {
    const post = await startWith()

    const unkeyed = await post('/optional', undefined)
    const keyed = await post('/optional', randomUUID())

    expect(unkeyed.json()).toEqual({ protected: false, run: 1 })
    expect(keyed.json()).toEqual({ protected: true, run: 2 })
  })

  it('replaces the answer with 503 store-unavailable when its completion cannot be written', async () => {
    const faulty = faultyStore(memoryStore())
    const post = await startWith({ store: faulty, recordRetryMs: 0 })
    faulty.block('complete', 'not-sent')

    const response = await post('/declined', randomUUID())

    expect(response.status).toBe(503)
    expect(response.headers.get('content-type')).toBe('application/problem+json; charset=utf-8')
    expect(response.json().code).toBe('IDEMPOTENCY_STORE_UNAVAILABLE')
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
  })

  it('records a response destroyed before it ended as an unknown effect', async () => {
    const post = await startWith()
    const key = randomUUID()

    await expect(post('/destroyed', key)).rejects.toThrow()
    const retry = await post('/destroyed', key)

    expect(retry.status).toBe(503)
    expect(retry.json().code).toBe('IDEMPOTENCY_RECOVERY_REQUIRED')
    expect(runs.get('destroyed')).toBe(1)
  })

  it('refuses @Idempotent() on anything but a method', () => {
    expect(() => Idempotent()({}, 'field', { value: 1 })).toThrow(TypeError)
  })

  it('calls a decorated method directly, outside a request, as a plain method', () => {
    const controller = new TestController()

    expect(controller.optional(null)).toEqual({ protected: false, run: 1 })
  })

  it('takes its options from forRootAsync with injected providers', async () => {
    const CONFIG = Symbol('config')
    @Module({ providers: [{ provide: CONFIG, useValue: { secret: SECRET } }], exports: [CONFIG] })
    class ConfigModule {}
    const shared = memoryStore()
    app = await start(platform, [
      IdempotencyModule.forRootAsync({
        imports: [ConfigModule],
        inject: [CONFIG],
        useFactory: async (config: { secret: string }) => ({
          store: shared,
          secrets: { current: 1, keys: { 1: config.secret } },
          principal,
        }),
      }),
    ])
    const http = running(app)
    const key = randomUUID()

    const first = await send(http, 'POST', '/guarded', { headers: authHeaders('bob', key), body: {} })
    const again = await send(http, 'POST', '/guarded', { headers: authHeaders('bob', key), body: {} })

    expect(first.status).toBe(201)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
  })

  it('takes its options from a forRootAsync factory that needs nothing injected', async () => {
    app = await start(platform, [
      IdempotencyModule.forRootAsync({ useFactory: () => ({ store: memoryStore(), secrets, principal }) }),
    ])
    const key = randomUUID()

    const first = await send(running(app), 'POST', '/guarded', { headers: authHeaders('erin', key), body: {} })

    expect(first.status).toBe(201)
    expect(first.json()).toEqual({ fencingToken: 1, aborted: false })
  })

  it('fails the start on invalid route options, naming the route', async () => {
    @Controller()
    class BadController {
      @Post('bad')
      @Idempotent({ leaseMs: -1 })
      bad() {
        return {}
      }
    }

    await expect(
      start(platform, [IdempotencyModule.forRoot({ store: memoryStore(), secrets, principal })], [BadController]),
    ).rejects.toMatchObject({ code: 'ERR_IDEM_INVALID_OPTION', message: expect.stringContaining('BadController.bad') })
  })

  it('fails the start on invalid module options', async () => {
    await expect(start(platform, [IdempotencyModule.forRoot({ store: memoryStore(), secrets })])).rejects.toMatchObject(
      { code: 'ERR_IDEM_INVALID_OPTION' },
    )
  })

  it("logs the store's startup report through Nest's logger", async () => {
    const lines: string[] = []
    const logger: LoggerService = {
      log: (message: unknown) => lines.push(`log ${message}`),
      warn: (message: unknown) => lines.push(`warn ${message}`),
      error: (message: unknown) => lines.push(`error ${message}`),
    }
    app = await start(
      platform,
      [IdempotencyModule.forRoot({ store: memoryStore(), secrets, principal })],
      undefined,
      logger,
    )
    const http = running(app)

    // On Express without a request logger, the outcome line goes to Nest's logger too.
    await send(http, 'POST', '/guarded', { headers: authHeaders('carol', randomUUID()), body: {} })

    expect(lines.some((line) => line.startsWith('warn idempotency store: records live in this process only'))).toBe(
      true,
    )
    if (platform === 'express') expect(lines.some((line) => line.startsWith('log idempotency outcome'))).toBe(true)
  })
})

describe('IdempotencyModule across both platforms', () => {
  it('shares records: a request answered on platform-express is replayed on platform-fastify', async () => {
    const store = memoryStore()
    const apps = await Promise.all(
      PLATFORMS.map((platform) => start(platform, [IdempotencyModule.forRoot({ store, secrets, principal })])),
    )
    const key = randomUUID()
    const body = { item: 'book', qty: '1' }
    try {
      const [onExpress, onFastify] = apps.map(running) as [RunningApp, RunningApp]
      const first = await send(onExpress, 'POST', '/validated', { headers: authHeaders('dan', key), body })
      const second = await send(onFastify, 'POST', '/validated', { headers: authHeaders('dan', key), body })

      expect(first.status).toBe(201)
      expect(second.headers.get('idempotent-replayed')).toBe('true')
      expect(second.body.equals(first.body)).toBe(true)
      expect(runs.get('validated')).toBe(1)
    } finally {
      await Promise.all(apps.map((app) => app.close()))
      runs.clear()
    }
  })

  it('runs these tests without decorator metadata, as tsx does: nothing above relies on it', () => {
    expect(Reflect.getMetadata('design:paramtypes', TestController.prototype, 'validated')).toBeUndefined()
  })
})
