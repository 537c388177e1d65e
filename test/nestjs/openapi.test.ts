/**
 * The contract in @nestjs/swagger's document (`@ApiIdempotent()`, plugins/nestjs/swagger.ts): the
 * NestJS example app serves the document SwaggerModule.createDocument() builds at
 * /openapi.json, on both platforms; every protected route in it has the Idempotency-Key header
 * parameter (as required as the route says, with its length and pattern), the status and replay
 * headers on its answer, and the 400, 401, 409, 422 and 503 application/problem+json responses
 * on one problem schema; unprotected routes are untouched and the document passes an OpenAPI 3
 * validator. Then the decorator's own cases on an app of its own: the module's options it is
 * told, a key from a `key` function, the route's own responses, either place and order.
 */
import 'reflect-metadata'
import { readFileSync } from 'node:fs'
import { Controller, Get, HttpCode, type INestApplication, Post } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import { ExpressAdapter } from '@nestjs/platform-express'
import { ApiBadRequestResponse, ApiCreatedResponse, ApiProperty, DocumentBuilder, SwaggerModule } from '@nestjs/swagger'
import { afterEach, describe, expect, it } from 'vitest'
import { buildNestExampleApp } from '../../examples/nest-app.js'
import { IdempotencyModule, Idempotent, memoryStore, type NestRequest } from '../../plugins/nestjs/index.js'
import { ApiIdempotent } from '../../plugins/nestjs/swagger.js'
import { SECRET } from '../helpers/example-app.js'
import {
  type Doc,
  KEY_SCHEMA,
  keyParameter,
  type OpenApiResponse,
  type Operation,
  PROBLEM_PROPERTIES,
  PROBLEM_STATUSES,
  validated,
} from '../helpers/openapi.js'

const PROBLEM_REF = '#/components/schemas/IdempotencyProblem'

/** The refusals of a protected operation: problem+json on the shared schema, with their headers. */
function expectRefusals(operation: Operation | undefined, statuses = PROBLEM_STATUSES): void {
  expect(operation).toBeDefined()
  const op = operation as Operation
  for (const status of statuses) {
    const response = op.responses[status]
    expect(response?.content?.['application/problem+json']?.schema).toEqual({ $ref: PROBLEM_REF })
    expect(Object.keys(response?.headers ?? {})).toEqual(
      expect.arrayContaining(['Idempotency-Status', 'x-should-retry']),
    )
  }
  for (const status of ['409', '503']) expect(Object.keys(op.responses[status]?.headers ?? {})).toContain('Retry-After')
}

function answerHeaders(response: OpenApiResponse | undefined) {
  return {
    status: response?.headers?.['Idempotency-Status']?.schema,
    replayed: response?.headers?.['Idempotent-Replayed']?.schema,
  }
}

const ANSWER_HEADERS = {
  status: { type: 'string', enum: ['executed', 'replayed'] },
  replayed: { type: 'string', enum: ['true'] },
}

describe.each(['express', 'fastify'] as const)(
  'the NestJS example app on %s documented by @nestjs/swagger',
  (platform) => {
    let app: INestApplication

    afterEach(async () => {
      await app.close()
    })

    async function document(): Promise<Doc> {
      app = await buildNestExampleApp({ store: memoryStore(), secret: SECRET, platform })
      await app.listen(0, '127.0.0.1')
      const { port } = app.getHttpServer().address() as { port: number }
      // No Authorization: the document is not behind the example's bearer guard.
      const response = await fetch(`http://127.0.0.1:${port}/openapi.json`)
      expect(response.status).toBe(200)
      return (await response.json()) as Doc
    }

    it('documents every protected route, leaves the others, and passes an OpenAPI 3 validator', async () => {
      const doc = await document()

      await validated(doc)
      for (const path of ['/orders', '/accounts/{id}/deposits']) {
        const operation = doc.paths[path]?.post
        expect(keyParameter(operation)).toEqual({
          in: 'header',
          name: 'Idempotency-Key',
          required: true,
          description: expect.stringContaining('1 to 255 visible ASCII characters'),
          schema: KEY_SCHEMA,
        })
        expectRefusals(operation)
        expect(answerHeaders(operation?.responses['201'])).toEqual(ANSWER_HEADERS)
      }
      expect(Object.keys(doc.components.schemas.IdempotencyProblem?.properties ?? {})).toEqual(PROBLEM_PROPERTIES)
      expect(doc.components.schemas.IdempotencyProblem?.required).toEqual(PROBLEM_PROPERTIES)
      for (const operation of [doc.paths['/orders']?.get, doc.paths['/accounts/{id}']?.get]) {
        expect(operation).toBeDefined()
        expect(keyParameter(operation)).toBeUndefined()
        expect((operation as Operation).responses).toEqual({ '200': { description: '' } })
      }
    })

    it('is what docs/openapi.md shows of POST /orders on NestJS', async () => {
      const doc = await document()
      const text = readFileSync(new URL('../../docs/openapi.md', import.meta.url), 'utf8')
      const nest = text.slice(text.indexOf('## NestJS'))
      const fragment = /```json\n([\s\S]*?)\n```/.exec(nest)?.[1]

      expect(fragment).toBeDefined()
      expect(doc.paths['/orders']?.post).toMatchObject(JSON.parse(fragment as string))
    })
  },
)

class OrderDto {
  @ApiProperty({ type: String }) id!: string
}

class InvalidOrderDto {
  @ApiProperty({ type: String }) message!: string
}

/** Decorated on the class: each @Idempotent() route, whatever the order of its decorators. */
@ApiIdempotent({ anonymous: true })
@Controller('a')
class ClassDocumented {
  @Post('orders')
  @ApiCreatedResponse({ type: OrderDto })
  @ApiBadRequestResponse({ description: 'Invalid order.', type: InvalidOrderDto })
  @Idempotent({ required: false })
  create() {
    return { id: 'o1' }
  }

  @Idempotent({ key: (request: NestRequest) => request.body?.id })
  @HttpCode(202)
  @Post('events')
  event() {
    return {}
  }

  @Get('orders')
  list() {
    return []
  }
}

/** Decorated on one method, above its @Idempotent(), with the module's `required: false`. */
@Controller('b')
class MethodDocumented {
  @Post('orders')
  @ApiIdempotent({ required: false })
  @Idempotent()
  create() {
    return {}
  }

  @Post('unprotected')
  plain() {
    return {}
  }
}

/** Both: the method is documented once. */
@ApiIdempotent()
@Controller('c')
class BothDocumented {
  @ApiIdempotent()
  @Post('orders')
  @Idempotent()
  create() {
    return {}
  }
}

describe('@ApiIdempotent() on an app of its own', () => {
  let app: INestApplication

  afterEach(async () => {
    await app.close()
  })

  async function document(): Promise<Doc> {
    const module = {
      module: class DocumentedModule {},
      imports: [
        IdempotencyModule.forRoot({
          store: memoryStore(),
          secrets: { current: 1, keys: { 1: SECRET } },
          anonymous: true,
        }),
      ],
      controllers: [ClassDocumented, MethodDocumented, BothDocumented],
    }
    app = await NestFactory.create(module, new ExpressAdapter(), { logger: false })
    const doc = SwaggerModule.createDocument(app, new DocumentBuilder().setTitle('t').setVersion('1').build())
    await validated(doc)
    return doc as unknown as Doc
  }

  it('documents the routes of a decorated class, their own responses kept beside the problems', async () => {
    const doc = await document()
    const create = doc.paths['/a/orders']?.post as Operation

    expect(keyParameter(create)).toMatchObject({ required: false, schema: KEY_SCHEMA })
    expect(keyParameter(create)?.required).toBe(false)
    // anonymous: true, as the module is told: no 401.
    expect(Object.keys(create.responses).sort()).toEqual(['201', '400', '409', '422', '503'])
    expectRefusals(create, ['400', '409', '422', '503'])
    expect(create.responses['201']?.content?.['application/json']?.schema).toEqual({
      $ref: '#/components/schemas/OrderDto',
    })
    expect(answerHeaders(create.responses['201'])).toEqual(ANSWER_HEADERS)
    expect(create.responses['400']?.description).toMatch(/^Invalid order\. The idempotency key is missing/)
    expect(create.responses['400']?.content?.['application/json']?.schema).toEqual({
      $ref: '#/components/schemas/InvalidOrderDto',
    })
    expect(doc.components.schemas.InvalidOrderDto).toBeDefined()

    // The key from a `key` function: no header parameter; its status from @HttpCode().
    const event = doc.paths['/a/events']?.post as Operation
    expect(keyParameter(event)).toBeUndefined()
    expectRefusals(event, ['400', '409', '422', '503'])
    expect(answerHeaders(event.responses['202'])).toEqual(ANSWER_HEADERS)

    expect(doc.paths['/a/orders']?.get?.responses).toEqual({ '200': { description: '' } })
  })

  it('documents one method, once however often it is decorated, and leaves the others', async () => {
    const doc = await document()

    const method = doc.paths['/b/orders']?.post as Operation
    expect(keyParameter(method)?.required).toBe(false)
    expectRefusals(method)
    // Written below @Post(): the method is not known yet, so the answer is the 2XX range.
    expect(answerHeaders(method.responses['2XX'])).toEqual(ANSWER_HEADERS)
    expect(doc.paths['/b/unprotected']?.post?.responses).toEqual({ '201': { description: '' } })
    expect(doc.paths['/b/unprotected']?.post?.parameters).toEqual([])

    const both = doc.paths['/c/orders']?.post as Operation
    expect(both.parameters?.filter((parameter) => parameter.name === 'Idempotency-Key')).toHaveLength(1)
    expect(keyParameter(both)?.required).toBe(true)
    expect(answerHeaders(both.responses['201'])).toEqual(ANSWER_HEADERS)
  })

  it('refuses a method without @Idempotent() below it, naming the fix', () => {
    const decorate = () => {
      class Late {
        @Idempotent()
        @ApiIdempotent()
        create() {}
      }
      return Late
    }
    expect(decorate).toThrow(
      /@ApiIdempotent\(\) on create: the method has no @Idempotent\(\) yet\. Write @ApiIdempotent\(\) above/,
    )
  })
})
