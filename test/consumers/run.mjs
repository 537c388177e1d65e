// The consumer tests: the package as a new user gets it. `npm pack`, then one fresh project per
// kind of app (module format, framework major, TypeScript resolution, store) in a directory
// outside the clone (test/consumers/location.mjs: inside it, Node would find the repository's
// own devDependencies and hide a missing peer). Each installs the tarball from a file next to
// only the packages its user would install, from the npm registry (no --force, no
// --legacy-peer-deps), and checks that no other peer is reachable from it. A TypeScript project
// type-checks with skipLibCheck off (the newest TypeScript against the newest @types/node, then
// TypeScript 5 against @types/node 20) and runs the app TypeScript 5 compiled; a plain
// JavaScript project runs its app as written. Either way the same POST twice answers 201, then
// the replay of that 201. A project with `postgres` runs against a PostgreSQL cluster started
// for the run (scripts/postgres-server.ts), one with `redis` against a redis-server started for
// the run (scripts/redis-server.ts), each stopped by PID. The `esm-orm-*` projects are one per ORM
// adapter (idemkit/drizzle, /kysely, /knex, /typeorm, /prisma): the handler writes through the
// ORM's own transaction, and the Prisma project generates its client offline first. A project
// with `runs` is a program, not a server: it must print that line and exit 0 (the BullMQ worker
// of docs/jobs.md). The `readme-quick-start` project does what the README says, as written: its
// install line for Fastify on Redis, the Quick start's shell lines (their `npm install`, `export`
// and `npx` commands) and its Fastify server saved as server.mts, on a redis-server started for
// it; the curl's request then answers 201, the replay, and 422 for another body.
//
//   node test/consumers/run.mjs [name...]   (default: every consumer)
//
// Writes .test-results/consumers.json ({ numPassedTests, numFailedTests }) for the closing line
// of .ci/run. The npm cache lives in the consumers' directory too.
import { execFile, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import { consumersDir } from './location.mjs'

const root = resolve(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '../..')
const work = consumersDir(root)
const cache = join(work, '.npm-cache')

/** The optional peers: a project must not reach any it did not install itself. */
const PEERS = [
  'ioredis',
  'pg',
  '@opentelemetry/api',
  'fastify',
  'express',
  'hono',
  '@hono/node-server',
  '@nestjs/core',
  '@nestjs/swagger',
  'koa',
  '@koa/router',
  'bullmq',
  'drizzle-orm',
  'kysely',
  'knex',
  'typeorm',
  '@prisma/client',
]

/** TypeScript compiler settings by resolution mode; each consumer adds only what its framework needs. */
const RESOLUTION = {
  'esm-nodenext': { type: 'module', compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext' } },
  'cjs-nodenext': { type: 'commonjs', compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext' } },
  bundler: { type: 'module', compilerOptions: { module: 'esnext', moduleResolution: 'bundler' } },
}

const NEST_COMPILER = { experimentalDecorators: true, emitDecoratorMetadata: true }

/** The consumer that follows the README's Install line and Quick start as written. */
const QUICK_START = 'readme-quick-start'

/**
 * The consumers: the app source (test/consumers/apps), its resolution mode, its dependencies.
 * `plain`: JavaScript run as written (the app file's own extension), nothing else installed.
 */
const CONSUMERS = [
  { name: QUICK_START, quickStart: true },
  { name: 'plain-cjs-express4', app: 'express-require.cjs', plain: true, dependencies: { express: '^4' } },
  { name: 'plain-esm-fastify4', app: 'fastify-memory.mjs', plain: true, dependencies: { fastify: '^4' } },
  {
    name: 'plain-cjs-express4-postgres',
    app: 'express-postgres.cjs',
    plain: true,
    postgres: true,
    dependencies: { express: '^4', pg: '^8' },
  },
  {
    // A Next.js App Router route file (app/orders/route.mjs) with idemkit/fetch and nothing else
    // installed, an ES module served by node:http as `next start` calls it (next-server.mjs).
    // examples/next is built and served by Next.js itself (test/fetch/next-example.test.ts).
    name: 'plain-esm-next-route',
    app: 'next-server.mjs',
    files: { 'app/orders/route.mjs': 'next-route.mjs' },
    plain: true,
    dependencies: {},
  },
  {
    // Koa 2 in CommonJS with @koa/router and @koa/bodyparser (Koa 3 in the test suite).
    name: 'plain-cjs-koa2',
    app: 'koa-require.cjs',
    plain: true,
    dependencies: { koa: '^2', '@koa/router': '^15', '@koa/bodyparser': '^6' },
  },
  {
    // docs/jobs.md's BullMQ worker as a new user installs it: idemkit, bullmq and ioredis; BullMQ 5
    // here, 6 in the test suite (test/jobs/bullmq.test.ts).
    name: 'plain-esm-bullmq',
    app: 'bullmq-worker.mjs',
    plain: true,
    redis: true,
    runs: /charged 1 time\(s\)/,
    dependencies: { bullmq: '^5', ioredis: '^5' },
  },
  { name: 'esm-fastify5', app: 'fastify', resolution: 'esm-nodenext', dependencies: { fastify: '^5' } },
  { name: 'esm-fastify4', app: 'fastify', resolution: 'esm-nodenext', dependencies: { fastify: '^4' } },
  {
    name: 'cjs-express4',
    app: 'express',
    resolution: 'cjs-nodenext',
    dependencies: { express: '^4', '@types/express': '^4' },
  },
  {
    name: 'esm-express5',
    app: 'express',
    resolution: 'esm-nodenext',
    dependencies: { express: '^5', '@types/express': '^5' },
  },
  {
    name: 'bundler-hono',
    app: 'hono',
    resolution: 'bundler',
    dependencies: { hono: '^4', '@hono/node-server': '^2' },
  },
  {
    // Nest 11's default project: CommonJS, `module: nodenext` (Nest 12 is ESM only), without
    // @nestjs/swagger: idemkit/nestjs needs none.
    name: 'cjs-nestjs11',
    app: 'nest',
    resolution: 'cjs-nodenext',
    compilerOptions: NEST_COMPILER,
    dependencies: {
      '@nestjs/common': '^11',
      '@nestjs/core': '^11',
      '@nestjs/platform-express': '^11',
      'reflect-metadata': '^0.2',
      rxjs: '^7',
    },
  },
  {
    // The same with @nestjs/swagger 11: @ApiIdempotent() from idemkit/nestjs/swagger.
    name: 'cjs-nestjs11-swagger',
    app: 'nest-swagger',
    resolution: 'cjs-nodenext',
    compilerOptions: NEST_COMPILER,
    dependencies: {
      '@nestjs/common': '^11',
      '@nestjs/core': '^11',
      '@nestjs/platform-express': '^11',
      '@nestjs/swagger': '^11',
      // Not used by the app: vitest.nest11.config.ts runs the HTTP table and the OpenAPI test on
      // it, whose example app validates with ValidationPipe (NestJS 11 loads these from its own
      // node_modules).
      '@nestjs/platform-fastify': '^11',
      'class-transformer': '^0.5',
      'class-validator': '^0.15',
      'reflect-metadata': '^0.2',
      rxjs: '^7',
    },
  },
  // One project per ORM adapter (docs/postgresql.md "With an ORM"): idemkit, the ORM, pg and its
  // types, nothing else (the app serves idemkit/fetch through node:http, apps/orm/serve.ts).
  // Each route runs in the ORM's own transaction and writes through `ledger.tx(...)`, typed per
  // adapter (an @ts-expect-error on a wrong call proves it is not `any`), on the run's PostgreSQL.
  ...ormConsumers([
    // drizzle-orm 0.45's own declarations do not compile with skipLibCheck off (its MySQL,
    // SingleStore, SQLite and Gel builders, reached from its root entry, and its missing mysql2 and
    // gel types; drizzle-team/drizzle-orm#5187): those errors are listed, any other fails.
    [
      'drizzle',
      { 'drizzle-orm': '^0.45' },
      undefined,
      { under: 'node_modules/drizzle-orm/', issue: 'drizzle-team/drizzle-orm#5187' },
    ],
    ['kysely', { kysely: '^0.28' }],
    ['knex', { knex: '^3' }],
    ['typeorm', { typeorm: '^1' }],
    // The client is generated in the project (src/generated) by `prisma generate`, offline.
    ['prisma', { '@prisma/client': '^7', '@prisma/adapter-pg': '^7', prisma: '^7' }, 'orm/schema.prisma'],
  ]),
]

/** The ORM consumers' definitions: `[orm, its packages, a Prisma schema, the ORM's own type errors]`. */
function ormConsumers(list) {
  return list.map(([orm, packages, prismaSchema, upstreamErrors]) => ({
    name: `esm-orm-${orm}`,
    app: `orm/${orm}`,
    resolution: 'esm-nodenext',
    postgres: true,
    files: { 'serve.ts': 'orm/serve.ts' },
    ...(prismaSchema === undefined ? {} : { prismaSchema }),
    ...(upstreamErrors === undefined ? {} : { upstreamErrors }),
    dependencies: { ...packages, pg: '^8', '@types/pg': '^8' },
  }))
}

/** The README's fenced blocks of one info string, in order. */
function readmeBlocks(info) {
  const readme = readFileSync(join(root, 'README.md'), 'utf8')
  return [...readme.matchAll(new RegExp(`^\`\`\`${info}\\n([\\s\\S]*?)^\`\`\`$`, 'gm'))].map((match) => match[1])
}

/** Sends the Quick start's request (its curl) with `body`. */
async function quickStartRequest(port, body) {
  const response = await fetch(`http://127.0.0.1:${port}/orders`, {
    method: 'POST',
    headers: {
      authorization: 'Bearer alice',
      'idempotency-key': '8e03978e-40d5-43e8-bc93-6894a57f9324',
      'content-type': 'application/json',
    },
    body: JSON.stringify(body),
  })
  return { status: response.status, replayed: response.headers.get('idempotent-replayed'), body: await response.text() }
}

/**
 * The README as a new user reads it: a fresh folder, the Install line for Fastify on Redis (the
 * packed tarball for \`idemkit\`), then the Quick start's shell lines in order, the server started
 * as the block starts it (\`npx ...\`, no \`--yes\`: npx must find what the lines installed).
 */
async function quickStartConsumer(tarball, record) {
  const cwd = join(work, QUICK_START)
  rmSync(cwd, { recursive: true, force: true })
  mkdirSync(cwd, { recursive: true })
  writeFileSync(join(cwd, 'package.json'), JSON.stringify({ name: `idemkit-consumer-${QUICK_START}`, private: true }))
  const [server] = readmeBlocks('ts server')
  writeFileSync(join(cwd, 'server.mts'), server)
  const install = readmeBlocks('sh')
    .flatMap((block) => block.split('\n'))
    .find((line) => /^npm install idemkit fastify ioredis\b/.test(line))
  const [shell] = readmeBlocks('sh').filter((block) => block.includes('server.mts'))
  if (install === undefined || shell === undefined) {
    record('the README has an install line for Fastify on Redis and a Quick start', { ok: false, detail: '' })
    return
  }
  const args = (line) => line.replace(/#.*$/, '').trim().split(/\s+/)
  const { tsImport } = await import('tsx/esm/api')
  const { startRedisServer, freePort } = await tsImport('../../scripts/redis-server.ts', import.meta.url)
  const redis = await startRedisServer({ config: { 'maxmemory-policy': 'noeviction' } })
  const port = await freePort()
  const env = { ...process.env, PORT: String(port), npm_config_cache: cache }
  let app
  try {
    for (const line of [install, ...shell.split('\n')]) {
      const [command, ...rest] = args(line)
      if (command === 'npm') {
        const npmArgs = rest.map((arg) => (arg === 'idemkit' ? tarball : arg))
        try {
          await npm(cwd, npmArgs)
          record(line.replace(/#.*$/, '').trim(), { ok: true })
        } catch (error) {
          record(line.replace(/#.*$/, '').trim(), { ok: false, detail: `${error.stderr}` })
          return
        }
      } else if (command === 'export') {
        const [name] = rest[0].split('=')
        // The values the lines would give: a fresh secret, and the Redis started for this run.
        env[name] = name === 'REDIS_URL' ? redis.url : randomBytes(32).toString('hex')
      } else if (command === 'npx') {
        app = spawn(
          'npx',
          rest.filter((arg) => arg !== '&'),
          { cwd, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
        )
      }
    }
    if (app === undefined) {
      record('the Quick start starts the server with npx', { ok: false, detail: shell })
      return
    }
    let output = ''
    app.stdout.on('data', (chunk) => {
      output += chunk
    })
    app.stderr.on('data', (chunk) => {
      output += chunk
    })
    const exited = new Promise((resolveExit) => app.once('exit', (code) => resolveExit(code)))
    const listening = (async () => {
      for (const deadline = Date.now() + 60_000; Date.now() < deadline; ) {
        if (/Server listening/.test(output)) return true
        await new Promise((resolveWait) => setTimeout(resolveWait, 100))
      }
      return false
    })()
    const started = await Promise.race([listening, exited.then(() => false)])
    if (!started) {
      record('npx starts server.mts as the Quick start says', { ok: false, detail: output })
      return
    }
    record('npx starts server.mts as the Quick start says', { ok: true })
    const first = await quickStartRequest(port, { item: 'book', qty: 1 })
    const again = await quickStartRequest(port, { item: 'book', qty: 1 })
    const other = await quickStartRequest(port, { item: 'book', qty: 2 })
    record("the curl's request answers 201, then its replay, and 422 for another body", {
      ok:
        first.status === 201 &&
        again.status === 201 &&
        again.replayed === 'true' &&
        again.body === first.body &&
        other.status === 422,
      detail: JSON.stringify({ first, again, other }),
    })
  } finally {
    // npx runs tsx, which runs node: the whole process group goes.
    if (app?.pid !== undefined) {
      try {
        process.kill(-app.pid, 'SIGKILL')
      } catch {}
    }
    await redis.stop()
  }
}

const TYPESCRIPTS = [
  ['typescript 5', 'typescript', '^5'],
  ['typescript newest', 'typescript-newest', 'npm:typescript@latest'],
]
const NODE_TYPES = ['^20', 'latest']

/** Consumers installed and checked at once: npm waits on the network, tsc on a core. */
const CONCURRENCY = 2

async function run(command, args, options = {}) {
  const { stdout } = await promisify(execFile)(command, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...options })
  return stdout
}

function npm(cwd, args) {
  return run('npm', [...args, '--no-audit', '--no-fund', '--cache', cache], { cwd })
}

async function pack() {
  if (!existsSync(join(root, 'dist/node10/index.d.ts'))) await run('npm', ['run', 'build'], { cwd: root })
  const [packed] = JSON.parse(await run('npm', ['pack', '--json', '--pack-destination', work], { cwd: root }))
  return join(work, packed.filename)
}

/** Runs the program to its end (at most 60 s); ok when it exits 0 having printed `expected`. */
async function runToEnd(cwd, file, env, expected) {
  const child = spawn(process.execPath, [file], {
    cwd,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout.on('data', (chunk) => {
    output += chunk
  })
  child.stderr.on('data', (chunk) => {
    output += chunk
  })
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000)
  const code = await new Promise((resolveCode) => child.once('exit', (exitCode) => resolveCode(exitCode)))
  clearTimeout(timer)
  return { ok: code === 0 && expected.test(output), detail: `exit ${code}: ${output.slice(-2000)}` }
}

/** Starts the app, waits for `listening <port>`, sends the POST twice, stops the app by PID. */
async function twoRequests(cwd, file, env) {
  const child = spawn(process.execPath, [file], {
    cwd,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  try {
    const port = await new Promise((resolvePort, reject) => {
      const timer = setTimeout(() => reject(new Error(`the app did not start: ${output}`)), 30_000)
      child.stdout.on('data', (chunk) => {
        output += chunk
        const match = /listening (\d+)/.exec(output)
        if (match) {
          clearTimeout(timer)
          resolvePort(Number(match[1]))
        }
      })
      child.stderr.on('data', (chunk) => {
        output += chunk
      })
      child.once('exit', (code) => reject(new Error(`the app exited with ${code}: ${output}`)))
    })
    const send = async () => {
      const response = await fetch(`http://127.0.0.1:${port}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'consumer-order-1' },
        body: JSON.stringify({ item: 'book' }),
      })
      return {
        status: response.status,
        replayed: response.headers.get('idempotent-replayed'),
        body: await response.text(),
      }
    }
    const first = await send()
    const second = await send()
    const ok =
      first.status === 201 &&
      first.replayed === null &&
      second.status === 201 &&
      second.replayed === 'true' &&
      second.body === first.body
    return { ok, detail: `first ${JSON.stringify(first)}, second ${JSON.stringify(second)}` }
  } catch (error) {
    return { ok: false, detail: String(error?.message ?? error) }
  } finally {
    child.kill('SIGTERM')
  }
}

/**
 * Type-checks the project (and emits, with `emit`). `upstream` (`{ under, issue }`): errors in the
 * declarations under that directory are a dependency's own, known upstream (`issue`); they are
 * listed, and only the others fail. tsc emits despite errors, so the app still runs.
 */
async function compile(cwd, compiler, emit, upstream) {
  const bin = join(cwd, 'node_modules', compiler, 'bin', 'tsc')
  try {
    await run(process.execPath, [bin, '-p', '.', ...(emit ? [] : ['--noEmit'])], { cwd })
    return { ok: true, detail: '' }
  } catch (error) {
    const output = `${error.stdout ?? ''}${error.stderr ?? ''}`.trim()
    if (upstream === undefined) return { ok: false, detail: output }
    // One error per line that does not start with a space (its explanation follows indented).
    const errors = output.split(/\n(?=\S)/)
    const ours = errors.filter((text) => !text.startsWith(upstream.under))
    return {
      ok: ours.length === 0 && /error TS/.test(output),
      detail: ours.length === 0 ? output : ours.join('\n'),
      upstream: errors.length - ours.length,
    }
  }
}

/**
 * `prisma generate` in the project, as scripts/prisma-generate.mjs runs it in the clone: the CLI
 * looks for a schema engine first and downloads one when it has none, which
 * PRISMA_SCHEMA_ENGINE_BINARY naming an existing file (Node.js; generate never runs it) stops.
 */
async function prismaGenerate(cwd) {
  try {
    await run(
      process.execPath,
      [join(cwd, 'node_modules/prisma/build/index.js'), 'generate', '--schema', 'schema.prisma'],
      {
        cwd,
        timeout: 120_000,
        env: {
          ...process.env,
          PRISMA_SCHEMA_ENGINE_BINARY: process.execPath,
          CHECKPOINT_DISABLE: '1',
          PRISMA_HIDE_UPDATE_MESSAGE: '1',
        },
      },
    )
    return { ok: existsSync(join(cwd, 'src/generated/client.ts')), detail: 'no src/generated/client.ts' }
  } catch (error) {
    return { ok: false, detail: `${error.stdout ?? ''}${error.stderr ?? ''}`.trim() }
  }
}

/**
 * The packages the project's own dependencies other than idemkit bring, by their lockfile (a
 * NestJS platform brings its framework): a peer among them reached the project without idemkit.
 */
function broughtByOthers(cwd, dependencies) {
  const lock = JSON.parse(readFileSync(join(cwd, 'package-lock.json'), 'utf8'))
  const brought = new Set()
  const queue = Object.keys(dependencies).filter((name) => name !== 'idemkit')
  for (let name = queue.shift(); name !== undefined; name = queue.shift()) {
    if (brought.has(name)) continue
    brought.add(name)
    const entry = lock.packages?.[`node_modules/${name}`] ?? {}
    for (const field of ['dependencies', 'optionalDependencies', 'peerDependencies']) {
      queue.push(...Object.keys(entry[field] ?? {}))
    }
  }
  return brought
}

/** Which optional peers the project can load that neither it nor its other dependencies brought (none, or a peer leaks in). */
function strayPeers(cwd, dependencies) {
  const requireHere = createRequire(join(cwd, 'package.json'))
  const brought = broughtByOthers(cwd, dependencies)
  return PEERS.filter((name) => {
    if (brought.has(name)) return false
    try {
      requireHere.resolve(name)
      return true
    } catch {
      return false
    }
  })
}

/** A plain JavaScript project: package.json with its dependencies and the app, run as written. */
async function plainConsumer(definition, tarball, record, env) {
  const cwd = join(work, definition.name)
  rmSync(cwd, { recursive: true, force: true })
  mkdirSync(cwd, { recursive: true })
  const dependencies = { idemkit: `file:${tarball}`, ...definition.dependencies }
  writeFileSync(
    join(cwd, 'package.json'),
    JSON.stringify({ name: `idemkit-consumer-${definition.name}`, private: true, dependencies }, null, 2),
  )
  writeFileSync(join(cwd, definition.app), readFileSync(join(root, 'test/consumers/apps', definition.app)))
  for (const [target, source] of Object.entries(definition.files ?? {})) {
    mkdirSync(join(cwd, target, '..'), { recursive: true })
    writeFileSync(join(cwd, target), readFileSync(join(root, 'test/consumers/apps', source)))
  }
  try {
    await npm(cwd, ['install'])
    record('npm install (no --force, no --legacy-peer-deps)', { ok: true })
  } catch (error) {
    record('npm install (no --force, no --legacy-peer-deps)', { ok: false, detail: `${error.stderr}` })
    return
  }
  const stray = strayPeers(cwd, dependencies)
  record(
    `no peer reachable${Object.keys(definition.dependencies).length > 0 ? ` but ${Object.keys(definition.dependencies).join(', ')}` : ''}`,
    {
      ok: stray.length === 0,
      detail: `reachable: ${stray.join(', ')}`,
    },
  )
  if (definition.runs !== undefined) {
    record(
      `the program prints ${definition.runs} and exits 0`,
      await runToEnd(cwd, definition.app, env, definition.runs),
    )
    return
  }
  record('the app answers 201, then the replay', await twoRequests(cwd, definition.app, env))
}

async function consumer(definition, tarball, results, env) {
  const record = (name, outcome) => {
    results.push({ name: `${definition.name}: ${name}`, ...outcome })
    console.log(`${outcome.ok ? 'ok  ' : 'FAIL'} ${definition.name}: ${name}${outcome.ok ? '' : `\n${outcome.detail}`}`)
  }
  if (definition.quickStart) return quickStartConsumer(tarball, record)
  if (definition.plain) return plainConsumer(definition, tarball, record, env)
  const cwd = join(work, definition.name)
  rmSync(cwd, { recursive: true, force: true })
  mkdirSync(join(cwd, 'src'), { recursive: true })
  const mode = RESOLUTION[definition.resolution]
  const devDependencies = Object.fromEntries(TYPESCRIPTS.map(([, name, range]) => [name, range]))
  writeFileSync(
    join(cwd, 'package.json'),
    JSON.stringify(
      {
        name: `idemkit-consumer-${definition.name}`,
        private: true,
        type: mode.type,
        dependencies: { idemkit: `file:${tarball}`, ...definition.dependencies },
        devDependencies: { ...devDependencies, '@types/node': NODE_TYPES[1] },
      },
      null,
      2,
    ),
  )
  writeFileSync(
    join(cwd, 'tsconfig.json'),
    JSON.stringify(
      {
        compilerOptions: {
          target: 'es2022',
          strict: true,
          esModuleInterop: true,
          skipLibCheck: false,
          types: ['node'],
          outDir: 'dist',
          rootDir: 'src',
          ...mode.compilerOptions,
          ...definition.compilerOptions,
        },
        include: ['src'],
      },
      null,
      2,
    ),
  )
  writeFileSync(join(cwd, 'src', 'app.ts'), readFileSync(join(root, 'test/consumers/apps', `${definition.app}.ts`)))
  for (const [target, source] of Object.entries(definition.files ?? {})) {
    writeFileSync(join(cwd, 'src', target), readFileSync(join(root, 'test/consumers/apps', source)))
  }
  if (definition.prismaSchema !== undefined) {
    writeFileSync(join(cwd, 'schema.prisma'), readFileSync(join(root, 'test/consumers/apps', definition.prismaSchema)))
  }

  try {
    await npm(cwd, ['install'])
    record('npm install (no --force, no --legacy-peer-deps)', { ok: true })
  } catch (error) {
    record('npm install (no --force, no --legacy-peer-deps)', { ok: false, detail: `${error.stderr}` })
    return
  }
  const stray = strayPeers(cwd, definition.dependencies)
  record('no peer reachable that the project did not install', {
    ok: stray.length === 0,
    detail: `reachable: ${stray.join(', ')}`,
  })
  if (definition.prismaSchema !== undefined) {
    const generated = await prismaGenerate(cwd)
    record('prisma generate, offline (no engine download)', generated)
    if (!generated.ok) return
  }

  // Two compilations cover both TypeScript lines and both @types/node lines in every resolution
  // mode: the newest TypeScript against the newest @types/node (type check only), then
  // TypeScript 5 against @types/node 20, whose output is the app that runs.
  const checks = [
    { typescript: TYPESCRIPTS[1], nodeTypes: NODE_TYPES[1], emit: false },
    { typescript: TYPESCRIPTS[0], nodeTypes: NODE_TYPES[0], emit: true },
  ]
  for (const [index, check] of checks.entries()) {
    if (index > 0) await npm(cwd, ['install', '--save-dev', `@types/node@${check.nodeTypes}`])
    const [label, name] = check.typescript
    const version = (file) => JSON.parse(readFileSync(join(cwd, 'node_modules', file, 'package.json'), 'utf8')).version
    const what = `tsc${check.emit ? '' : ' --noEmit'}, ${label} (${version(name)}), @types/node ${version('@types/node')}, ${definition.resolution}`
    const compiled = await compile(cwd, name, check.emit, definition.upstreamErrors)
    const upstream = compiled.upstream
      ? `, none but ${compiled.upstream} in ${definition.upstreamErrors.under} (${definition.upstreamErrors.issue})`
      : ''
    record(`${what}${upstream}`, compiled)
    if (check.emit && compiled.ok)
      record('compiled app answers 201, then the replay', await twoRequests(cwd, 'dist/app.js', env))
  }
}

/** A throwaway PostgreSQL cluster (scripts/postgres-server.ts, loaded through tsx). */
async function startPostgres() {
  const { tsImport } = await import('tsx/esm/api')
  const { startPostgresServer } = await tsImport('../../scripts/postgres-server.ts', import.meta.url)
  const { default: pg } = await import('pg')
  const server = await startPostgresServer()
  return {
    server,
    async database(name) {
      const database = name.replace(/[^a-z0-9]/g, '_')
      const client = new pg.Client({ connectionString: server.url })
      await client.connect()
      try {
        await client.query(`CREATE DATABASE ${database}`)
      } finally {
        await client.end()
      }
      return server.url.replace(/\/postgres$/, `/${database}`)
    },
  }
}

/** A throwaway redis-server (scripts/redis-server.ts, loaded through tsx). */
async function startRedis() {
  const { tsImport } = await import('tsx/esm/api')
  const { startRedisServer } = await tsImport('../../scripts/redis-server.ts', import.meta.url)
  return startRedisServer()
}

const wanted = process.argv.slice(2)
const selected = wanted.length === 0 ? CONSUMERS : CONSUMERS.filter((definition) => wanted.includes(definition.name))
if (selected.length === 0) throw new Error(`no consumer named ${wanted.join(', ')}`)
mkdirSync(work, { recursive: true })
const started = Date.now()
const tarball = await pack()
const results = []
const queue = [...selected]
// One PostgreSQL cluster for the projects that need one, each in a database of its own.
const postgres = selected.some((definition) => definition.postgres) ? await startPostgres() : undefined
// One redis-server for the projects that need one; each keeps its own keys (random ids).
const redis = selected.some((definition) => definition.redis) ? await startRedis() : undefined
try {
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
        const env = {
          ...(next.postgres ? { DATABASE_URL: await postgres.database(next.name) } : {}),
          ...(next.redis ? { REDIS_URL: redis.url, IDEMPOTENCY_SECRET: 'consumer-secret-'.repeat(2) } : {}),
        }
        await consumer(next, tarball, results, env)
      }
    }),
  )
} finally {
  await postgres?.server.stop()
  await redis?.stop()
}

const failed = results.filter((result) => !result.ok).length
mkdirSync(join(root, '.test-results'), { recursive: true })
writeFileSync(
  join(root, '.test-results/consumers.json'),
  JSON.stringify({ numPassedTests: results.length - failed, numFailedTests: failed }),
)
console.log(
  `consumers: ${results.length - failed} passed, ${failed} failed (${Math.round((Date.now() - started) / 1000)} s)`,
)
process.exitCode = failed > 0 ? 1 : 0
