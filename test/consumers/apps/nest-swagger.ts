// A NestJS app documented with @nestjs/swagger in Nest's default CommonJS setup
// (platform-express), against the installed tarball: `@ApiIdempotent()` from
// idemkit/nestjs/swagger on the controller. It builds the document first and stops with an
// error unless POST /orders has the Idempotency-Key parameter and the problem responses and
// GET /orders has neither; then it prints `listening <port>` once it accepts requests.
import 'reflect-metadata'
import type { AddressInfo } from 'node:net'
import { Controller, Get, HttpCode, Module, Post } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger'
import { IdempotencyModule, Idempotent, memoryStore } from 'idemkit/nestjs'
import { ApiIdempotent } from 'idemkit/nestjs/swagger'

let orders = 0

@ApiIdempotent({ anonymous: true })
@Controller('orders')
class OrdersController {
  @Post()
  @HttpCode(201)
  @Idempotent({ leaseMs: 5_000 })
  create(): { order: number } {
    orders += 1
    return { order: orders }
  }

  @Get()
  list(): { orders: number } {
    return { orders }
  }
}

// Type-checked, never called: an option of the wrong type is a compile error here too.
// @ts-expect-error anonymous is a boolean
export const typo = () => ApiIdempotent({ anonymous: 'yes' })

@Module({
  imports: [
    IdempotencyModule.forRoot({
      store: memoryStore(),
      secrets: { current: 1, keys: { 1: 'consumer-secret-'.repeat(2) } },
      anonymous: true,
    }),
  ],
  controllers: [OrdersController],
})
class AppModule {}

async function main(): Promise<void> {
  const app = await NestFactory.create(AppModule, { logger: false })
  const document = SwaggerModule.createDocument(app, new DocumentBuilder().setTitle('orders').build())
  const post = document.paths['/orders']?.post
  const get = document.paths['/orders']?.get
  const key = post?.parameters?.find((parameter) => 'name' in parameter && parameter.name === 'Idempotency-Key')
  const statuses = Object.keys(post?.responses ?? {}).join(',')
  if (key === undefined || statuses !== '201,400,409,422,503' || (get?.parameters ?? []).length > 0) {
    throw new Error(`the document lacks the contract: ${JSON.stringify(document.paths)}`)
  }
  if (document.components?.schemas?.IdempotencyProblem === undefined) {
    throw new Error('the document has no IdempotencyProblem schema')
  }
  await app.listen(0, '127.0.0.1')
  console.log(`listening ${(app.getHttpServer().address() as AddressInfo).port}`)
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
