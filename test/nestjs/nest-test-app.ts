/**
 * A Nest application with only the given test routes (test/helpers/adapters.ts `custom`), on
 * either platform; its handlers write their answer chunk by chunk on the platform's response.
 */
import 'reflect-metadata'
import type { ServerResponse } from 'node:http'
import { Readable, type Writable } from 'node:stream'
import { Body, Controller, type INestApplication, Post, Res, type Type } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import { ExpressAdapter } from '@nestjs/platform-express'
import { FastifyAdapter } from '@nestjs/platform-fastify'
import type { NestPlatform } from '../../examples/nest-app.js'
import {
  IdempotencyInfo,
  IdempotencyModule,
  Idempotent,
  type NestIdempotencyOptions,
  type NestIdempotencyRouteOptions,
  type NestRequest,
} from '../../plugins/nestjs/index.js'
import { routeOptionsOf, type TestRoute } from '../helpers/adapters.js'

interface FastifyReplyLike {
  readonly raw: ServerResponse
  code(status: number): unknown
  headers(headers: object): unknown
  send(body: unknown): unknown
}

const nextTick = () => new Promise<void>((resolve) => setImmediate(resolve))

/** One controller per route, its decorators applied as written in an application. */
function routeController(route: TestRoute): Type {
  @Controller()
  class TestRouteController {
    @Post(route.path)
    @Idempotent(routeOptionsOf(route, (request: NestRequest) => request.body) as NestIdempotencyRouteOptions)
    async handle(
      @Body() body: unknown,
      @IdempotencyInfo() idempotency: IdempotencyInfo | null,
      @Res() response: ServerResponse | FastifyReplyLike,
    ) {
      const answer = route.reply({ body, idempotency })
      if ('raw' in response) {
        // Fastify: a stream payload, sent chunk by chunk.
        response.code(answer.status)
        response.headers({ ...answer.headers })
        response.send(Readable.from(answer.chunks.map((chunk) => Buffer.from(chunk))))
        return
      }
      response.statusCode = answer.status
      for (const [name, value] of Object.entries(answer.headers ?? {})) response.setHeader(name, value)
      for (const chunk of answer.chunks) {
        response.write(chunk)
        await nextTick()
      }
      response.end()
    }
  }
  return TestRouteController
}

export async function nestTestApp(
  platform: NestPlatform,
  options: NestIdempotencyOptions,
  routes: readonly TestRoute[],
  logs: Writable,
): Promise<INestApplication> {
  const module = {
    module: class TestModule {},
    imports: [IdempotencyModule.forRoot(options)],
    controllers: routes.map(routeController),
  }
  const line = (level: number) => (object: object, msg: string) =>
    logs.write(`${JSON.stringify({ level, ...object, msg })}\n`)
  const log = { info: line(30), warn: line(40), error: line(50) }
  const adapter =
    platform === 'fastify' ? new FastifyAdapter({ logger: { level: 'info', stream: logs } }) : new ExpressAdapter()
  const app = await NestFactory.create(module, adapter, { logger: false })
  if (platform === 'express') {
    app.use((req: { log?: unknown }, _res: unknown, next: () => void) => {
      req.log = log
      next()
    })
  }
  await app.init()
  return app
}
