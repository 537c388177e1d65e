/**
 * Run by vitest.nest11.config.ts only: the NestJS packages the adapter under test loads are
 * NestJS 11's (and @nestjs/swagger 11's), not the devDependencies' 12.
 */
import { Module } from '@nestjs/common'
import commonPackage from '@nestjs/common/package.json' with { type: 'json' }
import { NestFactory } from '@nestjs/core'
import corePackage from '@nestjs/core/package.json' with { type: 'json' }
import swaggerPackage from '@nestjs/swagger/package.json' with { type: 'json' }
import { expect, it } from 'vitest'
import { IdempotencyModule, memoryStore } from '../../plugins/nestjs/index.js'

it('runs the NestJS major under test: 11', async () => {
  expect(corePackage.version).toMatch(/^11\./)
  expect(commonPackage.version).toMatch(/^11\./)
  expect(swaggerPackage.version).toMatch(/^11\./)

  @Module({
    imports: [
      IdempotencyModule.forRoot({
        store: memoryStore(),
        secrets: { current: 1, keys: { 1: 'x'.repeat(32) } },
        anonymous: true,
      }),
    ],
  })
  class AppModule {}
  const app = await NestFactory.create(AppModule, { logger: false })
  await app.init()
  await app.close()
})
