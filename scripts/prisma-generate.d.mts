/** Writes the tests' Prisma client unless it is there (or `force`). */
export function prismaGenerate(options?: { force?: boolean }): void
