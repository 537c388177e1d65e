/**
 * The install table of docs/getting-started.md lists every dependency and peer dependency of
 * package.json, with package.json's range and whether the peer is optional, and nothing else.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { expect, it } from 'vitest'
import { ROOT, tablesUnder } from './markdown.js'

interface Manifest {
  readonly dependencies: Record<string, string>
  readonly peerDependencies: Record<string, string>
  readonly peerDependenciesMeta: Record<string, { optional?: boolean }>
}

it('lists exactly the dependencies and peers of package.json, with their ranges', () => {
  const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as Manifest
  const expected = [
    ...Object.entries(manifest.dependencies).map(([name, range]) => [name, range, 'dependency']),
    ...Object.entries(manifest.peerDependencies).map(([name, range]) => [
      name,
      range,
      manifest.peerDependenciesMeta[name]?.optional === true ? 'optional peer' : 'peer',
    ]),
  ]
  const rows = tablesUnder('docs/getting-started.md', 'What to install').map((row) => [
    (row.cells.package ?? '').replace(/`/g, ''),
    row.cells.range ?? '',
    row.cells.kind ?? '',
  ])
  expect(rows.sort()).toEqual(expected.sort())
})
