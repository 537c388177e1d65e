// Completes `dist/` after tsc (one ESM build) so that the package loads from both module systems
// with one copy of its code:
//
// 1. The Lua scripts and the PostgreSQL migrations (the numbered SQL files) are copied next to the compiled stores, which
//    find them with `import.meta.url` as `src/` does.
// 2. Every `.d.ts` gets a `.d.cts` twin whose relative imports name `.cjs` files: a CommonJS
//    consumer's TypeScript then reads CommonJS declarations (for `require`) end to end.
// 3. Every entry in package.json's `exports` whose `require` target is `X.cjs` gets that file:
//    the names of `X.js`, required through Node's require(esm) from the one ESM build; where
//    `X.js`'s default export is a function, `require()` returns that function, the names on it. No second
//    copy of the module state exists, so `instanceof IdempotencyError`, the stores and the
//    in-process waiter registry are the same objects whether the app imports or requires.
// 4. A declaration's type import from a store client that the entries reach only through
//    `redisStore` (ioredis) gets a `// @ts-ignore` line: a project without that client, type-checked
//    with `skipLibCheck: false`, reads those types as `any` instead of failing on a package it never
//    installed (as Vite does for its optional preprocessors). With the client installed, the types
//    are the client's own.
// 5. For TypeScript's legacy `node10` resolution (`"module": "commonjs"` without `exports`
//    support), `dist/node10/<subpath>.d.ts` re-exports each subpath's `.d.cts`; package.json's
//    `typesVersions` maps every subpath there with one pattern.
//
// Adding an entry point is one line in package.json's `exports`; this script derives the rest.
import { cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join, posix, relative } from 'node:path'
import { pathToFileURL } from 'node:url'

const packageJson = JSON.parse(readFileSync('package.json', 'utf8'))

cpSync('src/stores/redis/scripts', 'dist/src/stores/redis/scripts', {
  recursive: true,
  filter: (source) => !source.includes('.') || source.endsWith('.lua'),
})
cpSync('src/stores/postgres/sql', 'dist/src/stores/postgres/sql', { recursive: true })

/** Rewrites `'./x.js'` and `"../y/z.js"` specifiers (relative only) to `.cjs`. */
function cjsSpecifiers(text) {
  return text.replace(/(['"])(\.{1,2}\/[^'"]*?)\.js\1/g, '$1$2.cjs$1')
}

function* declarations(directory) {
  for (const entry of readdirSync(directory, { withFileTypes: true })) {
    const path = join(directory, entry.name)
    if (entry.isDirectory()) yield* declarations(path)
    else if (entry.name.endsWith('.d.ts')) yield path
  }
}

/** Store clients imported for their types only, by files every framework entry reaches. */
const OPTIONAL_TYPE_PEERS = ['ioredis']
const optionalImport = new RegExp(`^(.*\\bfrom (['"])(${OPTIONAL_TYPE_PEERS.join('|')})\\2;?)$`, 'gm')

for (const file of [...declarations('dist')]) {
  const text = readFileSync(file, 'utf8').replace(
    optionalImport,
    '// @ts-ignore $3 is an optional peer: without it, its types are any here\n$1',
  )
  writeFileSync(file, text)
  writeFileSync(file.replace(/\.d\.ts$/, '.d.cts'), cjsSpecifiers(text))
}

/** Whether a declaration file has a default export (`export default`, `export { x as default }`). */
function hasDefault(declarationFile) {
  const text = readFileSync(declarationFile, 'utf8')
  return /^export default /m.test(text) || /\bas default\b/.test(text)
}

for (const [subpath, target] of Object.entries(packageJson.exports)) {
  if (typeof target !== 'object' || target.require === undefined) continue
  const required = target.require
  if (target.import.replace(/\.js$/, '.cjs') !== required) {
    throw new Error(`exports["${subpath}"]: require must be the import target with .cjs (${target.import})`)
  }
  // The names, read from the built module itself, are written out one by one (TypeScript's own
  // form of a CommonJS export), so Node's and bundlers' CommonJS export detection see them.
  const built = await import(pathToFileURL(target.import).href)
  const names = Object.keys(built).sort()
  const module = posix.basename(target.import)
  const getters = names.map(
    (name) =>
      `Object.defineProperty(exports, ${JSON.stringify(name)}, { enumerable: true, get: function () { return esm[${JSON.stringify(name)}] } })`,
  )
  writeFileSync(
    required,
    [
      "'use strict'",
      '// CommonJS entry: the ESM build itself through require(esm), one copy of the module state.',
      `const esm = require('./${module}')`,
      // An entry whose default export is a function (a plugin, a middleware factory) is that
      // function under require(), as CommonJS packages of its kind are: require('idemkit/express')
      // is called as it is, and carries every named export (its .default is itself).
      ...(typeof built.default === 'function' ? ['exports = module.exports = esm.default'] : []),
      "Object.defineProperty(exports, '__esModule', { value: true })",
      ...getters,
      '',
    ].join('\n'),
  )

  const name = subpath === '.' ? 'index' : subpath.slice(2)
  const shim = join('dist/node10', `${name}.d.ts`)
  const declaration = required.replace(/\.cjs$/, '.d.cts')
  const from = relative(dirname(shim), declaration).replace(/\.d\.cts$/, '.cjs')
  const specifier = JSON.stringify(from.startsWith('.') ? from : `./${from}`)
  mkdirSync(dirname(shim), { recursive: true })
  const lines = [`export * from ${specifier}`]
  if (hasDefault(declaration)) lines.push(`export { default } from ${specifier}`)
  writeFileSync(shim, `${lines.join('\n')}\n`)
}
