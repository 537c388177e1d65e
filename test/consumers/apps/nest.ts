// A NestJS app in Nest's default CommonJS setup (platform-express), against the installed
// tarball. Prints `listening <port>` once it accepts requests.
import 'reflect-metadata'
import type { AddressInfo } from 'node:net'
import { Controller, HttpCode, Module, Post } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import { IdempotencyModule, Idempotent, memoryStore } from 'idemkit/nestjs'

let orders = 0

@Controller('orders')
class OrdersController {
  @Post()
  @HttpCode(201)
  @Idempotent({ leaseMs: 5_000 })
  create(): { order: number } {
    orders += 1
    return { order: orders }
  }
}

// Type-checked, never called: a route option of the wrong type is a compile error here too.
// @ts-expect-error leaseMs is a number
export const typo = () => Idempotent({ leaseMs: '5s' })

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
  await app.listen(0, '127.0.0.1')
  console.log(`listening ${(app.getHttpServer().address() as AddressInfo).port}`)
}

void main()
