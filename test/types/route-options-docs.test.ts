/**
 * Route options carry their docs where users see them: every property of each framework's
 * route options type has a description (not only a `@default` tag), read with the TypeScript
 * compiler the way an editor's hover reads it, and the build keeps comments in the
 * declarations it ships.
 */
import { readFileSync } from 'node:fs'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const ENTRIES = [
  ['plugins/fastify/index.ts', 'FastifyIdempotencyRouteOptions'],
  ['plugins/express/index.ts', 'ExpressIdempotencyRouteOptions'],
  ['plugins/hono/index.ts', 'HonoIdempotencyRouteOptions'],
  ['plugins/nestjs/index.ts', 'NestIdempotencyRouteOptions'],
] as const

/** One program for all four entries (built on first use: a program takes seconds). */
let program: ts.Program | undefined

function routeOptionDocs(file: string, name: string): Map<string, { text: string; defaultTag: string | undefined }> {
  program ??= ts.createProgram(
    ENTRIES.map(([entry]) => entry),
    {
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
      strict: true,
      experimentalDecorators: true,
      skipLibCheck: true,
      noEmit: true,
    },
  )
  const checker = program.getTypeChecker()
  const source = program.getSourceFile(file)
  if (source === undefined) throw new Error(`${file} not found`)
  const moduleSymbol = checker.getSymbolAtLocation(source)
  if (moduleSymbol === undefined) throw new Error(`${file} is no module`)
  const exported = checker.getExportsOfModule(moduleSymbol).find((symbol) => symbol.name === name)
  if (exported === undefined) throw new Error(`${file} does not export ${name}`)
  const type = checker.getDeclaredTypeOfSymbol(checker.getAliasedSymbol(exported))
  const docs = new Map<string, { text: string; defaultTag: string | undefined }>()
  for (const property of type.getProperties()) {
    const text = ts.displayPartsToString(property.getDocumentationComment(checker))
    const tag = property.getJsDocTags(checker).find((candidate) => candidate.name === 'default')
    docs.set(property.name, { text, defaultTag: tag ? ts.displayPartsToString(tag.text) : undefined })
  }
  return docs
}

describe('route option docs', () => {
  it.each(ENTRIES)('%s: every property of %s is described', (file, name) => {
    const docs = routeOptionDocs(file, name)

    expect([...docs.keys()]).toEqual(expect.arrayContaining(['leaseMs', 'replayWindowMs', 'inFlight', 'transaction']))
    for (const [property, doc] of docs) {
      // A sentence, not only a tag: "@default 30000" alone says nothing on hover.
      expect(doc.text.length, property).toBeGreaterThan(40)
    }
    expect(docs.get('leaseMs')?.defaultTag).toBe('30000')
    expect(docs.get('replayWindowMs')?.text).toContain('replayed')
  })

  it('keeps comments in the shipped declarations', () => {
    const build = JSON.parse(readFileSync('tsconfig.build.json', 'utf8'))
    const base = JSON.parse(readFileSync('tsconfig.json', 'utf8'))

    expect(build.compilerOptions.declaration).toBe(true)
    expect(build.compilerOptions.removeComments ?? base.compilerOptions.removeComments ?? false).toBe(false)
  })
})
