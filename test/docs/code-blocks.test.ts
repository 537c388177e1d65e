/**
 * Every TypeScript block in README.md and docs/ is compiled under the project's strict settings,
 * with `idemkit`, `idemkit/express`, ... resolved to this repository's source (the entry points
 * of package.json `exports`), so the docs cannot drift from the code. Blocks whose info string
 * says more are also run:
 *
 * - ```ts run: runs to its end with `node --import tsx` and must exit 0;
 * - ```ts server: a server reading PORT; once it listens, the same POST /orders with one
 *   Idempotency-Key is sent twice (the quick starts' curl), and the second must replay the first;
 *   a third with another body must be refused with 422.
 *
 * Both get REDIS_URL and DATABASE_URL (the suite's own servers) and an IDEMPOTENCY_SECRET.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import ts from 'typescript'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { freePort } from '../../scripts/redis-server.js'
import { type CodeBlock, codeBlocks, isTypeScript, markdownFiles, ROOT } from './markdown.js'

const WORK = join(ROOT, '.test-results', 'docs-blocks')

const BLOCKS = markdownFiles().flatMap((file) => codeBlocks(file).filter(isTypeScript))

/** `idemkit/<entry>` → the source file behind package.json's `exports` (dist/X.d.ts → X.ts). */
function entryPaths(): Record<string, string[]> {
  const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
    name: string
    exports: Record<string, string | { types?: string }>
  }
  const paths: Record<string, string[]> = {}
  for (const [subpath, target] of Object.entries(manifest.exports)) {
    const types = typeof target === 'string' ? undefined : target.types
    if (types === undefined) continue
    const source = types.replace(/^\.\/dist\//, '').replace(/\.d\.ts$/, '.ts')
    paths[subpath === '.' ? manifest.name : `${manifest.name}${subpath.slice(1)}`] = [join(ROOT, source)]
  }
  return paths
}

function blockFile(block: CodeBlock): string {
  return join(WORK, `${block.file.replace(/[^A-Za-z0-9]+/g, '_')}_L${block.line}.ts`)
}

function compilerOptions(): ts.CompilerOptions {
  const read = ts.readConfigFile(join(ROOT, 'tsconfig.json'), ts.sys.readFile)
  const parsed = ts.parseJsonConfigFileContent(read.config, ts.sys, ROOT)
  return { ...parsed.options, strict: true, noEmit: true, paths: entryPaths() }
}

/** Diagnostics per block file, as `file:line: TSxxxx message` with the Markdown line. */
function typeCheck(blocks: readonly CodeBlock[]): Map<string, string[]> {
  const files = blocks.map(blockFile)
  const program = ts.createProgram(files, compilerOptions())
  const found = new Map<string, string[]>(files.map((file) => [file, []]))
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const file = diagnostic.file?.fileName
    const block = blocks.find((candidate) => blockFile(candidate) === file)
    const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')
    if (block === undefined || diagnostic.file === undefined || diagnostic.start === undefined) {
      // A diagnostic outside the blocks (a global one) belongs to all of them.
      for (const list of found.values()) list.push(`TS${diagnostic.code}: ${message}`)
      continue
    }
    const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start)
    found.get(blockFile(block))?.push(`${block.file}:${block.line + 1 + line}: TS${diagnostic.code}: ${message}`)
  }
  return found
}

function runEnv(): NodeJS.ProcessEnv {
  return {
    ...process.env,
    REDIS_URL: inject('redisUrl'),
    DATABASE_URL: inject('postgresUrl'),
    IDEMPOTENCY_SECRET: randomBytes(32).toString('hex'),
    TSX_TSCONFIG_PATH: join(WORK, 'tsconfig.json'),
  }
}

function start(
  block: CodeBlock,
  env: NodeJS.ProcessEnv,
): { child: ChildProcess; output: () => string; exit: Promise<number | null> } {
  const child = spawn(process.execPath, ['--import', 'tsx', blockFile(block)], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  child.stderr?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  // Stack frames left out: the test's own error must not carry the child's frames as its stack.
  const text = () => output.slice(-4000).replace(/^\s+at .*$/gm, '    at …')
  return { child, output: text, exit }
}

let diagnostics: Map<string, string[]>

beforeAll(() => {
  rmSync(WORK, { recursive: true, force: true })
  mkdirSync(WORK, { recursive: true })
  for (const block of BLOCKS) writeFileSync(blockFile(block), block.code)
  // For the runs: tsx maps the same entry points to the source.
  const project = ts.readConfigFile(join(ROOT, 'tsconfig.json'), ts.sys.readFile).config as {
    compilerOptions: Record<string, unknown>
  }
  writeFileSync(
    join(WORK, 'tsconfig.json'),
    JSON.stringify({ compilerOptions: { ...project.compilerOptions, paths: entryPaths() } }),
  )
  diagnostics = typeCheck(BLOCKS)
}, 180_000)

afterAll(() => {
  rmSync(WORK, { recursive: true, force: true })
})

describe('the TypeScript blocks of README.md and docs/', () => {
  it('are there to check: README has its quick start blocks', () => {
    expect(BLOCKS.filter((block) => block.file === 'README.md').length).toBeGreaterThanOrEqual(4)
    expect(BLOCKS.filter((block) => block.flags.includes('server')).length).toBeGreaterThanOrEqual(4)
  })

  it.each(BLOCKS.map((block) => [`${block.file}:${block.line}`, block] as const))(
    '%s compiles under strict',
    (_name, block) => {
      expect(diagnostics.get(blockFile(block))).toEqual([])
    },
  )
})

describe('the Redis clients of the blocks', () => {
  const clients = BLOCKS.filter((block) => /new (Redis|Cluster)\(/.test(block.code))

  // One recommendation everywhere: every call bounded, one retry, no re-send behind the store's back.
  it.each(clients.map((block) => [`${block.file}:${block.line}`, block] as const))(
    '%s has the recommended client settings',
    (_name, block) => {
      for (const setting of [
        'commandTimeout: 2000',
        'maxRetriesPerRequest: 1',
        'autoResendUnfulfilledCommands: false',
      ]) {
        expect(block.code).toContain(setting)
      }
    },
  )
})

describe('the runnable blocks', () => {
  const runs = BLOCKS.filter((block) => block.flags.includes('run'))
  const servers = BLOCKS.filter((block) => block.flags.includes('server'))

  it.each(runs.map((block) => [`${block.file}:${block.line}`, block] as const))(
    '%s runs to its end',
    async (_name, block) => {
      const run = start(block, runEnv())
      const code = await run.exit
      expect({ code, output: run.output() }).toMatchObject({ code: 0 })
    },
    60_000,
  )

  it.each(servers.map((block) => [`${block.file}:${block.line}`, block] as const))(
    '%s serves POST /orders, replays a retry and refuses another body',
    async (_name, block) => {
      const port = await freePort()
      const run = start(block, { ...runEnv(), PORT: String(port) })
      try {
        const url = `http://127.0.0.1:${port}/orders`
        const deadline = Date.now() + 30_000
        const headers = {
          authorization: 'Bearer alice',
          'content-type': 'application/json',
          'idempotency-key': randomUUID(),
        }
        const body = JSON.stringify({ item: 'book', qty: 1 })
        let first: Response | undefined
        while (first === undefined) {
          if (run.child.exitCode !== null) throw new Error(`exited early: ${run.output()}`)
          if (Date.now() > deadline) throw new Error(`did not listen within 30 s: ${run.output()}`)
          first = await fetch(url, { method: 'POST', headers, body }).catch(async () => {
            await new Promise((resolve) => setTimeout(resolve, 100))
            return undefined
          })
        }
        const firstText = await first.text()
        const retry = await fetch(url, { method: 'POST', headers, body })
        const reused = await fetch(url, { method: 'POST', headers, body: JSON.stringify({ item: 'pen', qty: 1 }) })

        expect({ status: first.status, output: run.output() }).toMatchObject({ status: 201 })
        expect(retry.status).toBe(201)
        expect(retry.headers.get('idempotent-replayed')).toBe('true')
        expect(await retry.text()).toBe(firstText)
        expect(reused.status).toBe(422)
        expect(await reused.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
      } finally {
        if (run.child.exitCode === null) run.child.kill('SIGKILL')
        await run.exit
      }
    },
    60_000,
  )
})
