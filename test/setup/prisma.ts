/**
 * vitest global setup: the tests' Prisma client (test/prisma/schema.prisma), generated when it is
 * missing (scripts/prisma-generate.mjs: no engine download), before any file imports it.
 */
import { prismaGenerate } from '../../scripts/prisma-generate.mjs'

export function setup(): void {
  prismaGenerate()
}
