/**
 * examples/next, the Next.js App Router route handler, as a Next.js user runs it: `next build`
 * (Turbopack, offline: the SWC binary is the installed @next/swc-* package), then `next start`,
 * with idemkit installed in the project's node_modules as the package is built (package.json
 * and dist/) and Redis from the suite's redis-server. The Quick start's requests then answer 201,
 * the replay, 422 for another body with that key, and 409 to a retry while the first still runs.
 * The project is a copy under .test-results (two levels below the root, as the example is, so
 * its next.config.ts finds this repository's node_modules), and the server is stopped by PID.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { cpSync, existsSync, mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { freePort } from '../../scripts/redis-server.js'
import { sleep } from '../helpers/sleep.js'

const ROOT = join(import.meta.dirname, '../..')
const PROJECT = join(ROOT, '.test-results', 'next-example')
const NEXT = join(ROOT, 'node_modules', 'next', 'dist', 'bin', 'next')

const run = promisify(execFile)

/** The example copied, with idemkit "installed": the built package.json and dist/. */
async function prepareProject(): Promise<void> {
  if (!existsSync(join(ROOT, 'dist', 'plugins', 'fetch', 'index.js'))) await run('npm', ['run', 'build'], { cwd: ROOT })
  rmSync(PROJECT, { recursive: true, force: true })
  mkdirSync(PROJECT, { recursive: true })
  for (const entry of ['app', 'next.config.ts', 'package.json', 'tsconfig.json']) {
    cpSync(join(ROOT, 'examples', 'next', entry), join(PROJECT, entry), { recursive: true })
  }
  const installed = join(PROJECT, 'node_modules', 'idemkit')
  mkdirSync(installed, { recursive: true })
  cpSync(join(ROOT, 'package.json'), join(installed, 'package.json'))
  cpSync(join(ROOT, 'dist'), join(installed, 'dist'), { recursive: true })
}

const nextEnv = (): NodeJS.ProcessEnv => ({ ...process.env, NEXT_TELEMETRY_DISABLED: '1', NODE_ENV: 'production' })

describe('examples/next built with next build and served by next start', () => {
  let server: ChildProcess | undefined
  let output = ''
  let base = ''

  beforeAll(async () => {
    await prepareProject()
    // The build has neither the secret nor Redis: the route makes its handler on the first request.
    try {
      await run(process.execPath, [NEXT, 'build'], { cwd: PROJECT, env: nextEnv(), maxBuffer: 16 << 20 })
    } catch (error) {
      const { stdout, stderr } = error as { stdout?: string; stderr?: string }
      throw new Error(`next build failed:\n${stdout ?? ''}${stderr ?? ''}`)
    }
    const port = await freePort()
    base = `http://127.0.0.1:${port}`
    // Its own process group: stopped with everything it started, by PID.
    server = spawn(process.execPath, [NEXT, 'start', '-p', String(port), '-H', '127.0.0.1'], {
      cwd: PROJECT,
      env: {
        ...nextEnv(),
        REDIS_URL: inject('redisUrl'),
        IDEMPOTENCY_SECRET: randomBytes(32).toString('hex'),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    })
    const collect = (chunk: Buffer) => {
      output += chunk.toString()
    }
    server.stdout?.on('data', collect)
    server.stderr?.on('data', collect)
    for (const deadline = Date.now() + 60_000; !/Ready in/.test(output); await sleep(100)) {
      if (server.exitCode !== null) throw new Error(`next start exited: ${output}`)
      if (Date.now() > deadline) throw new Error(`next start did not get ready in 60 s: ${output}`)
    }
  }, 300_000)

  afterAll(async () => {
    if (server?.pid !== undefined && server.exitCode === null) {
      const exited = new Promise<void>((resolve) => server?.once('exit', () => resolve()))
      try {
        process.kill(-server.pid, 'SIGKILL')
      } catch {}
      await exited
    }
  }, 30_000)

  /** The Quick start's curl: POST /orders as alice with `key`. */
  async function order(key: string, body: object) {
    const response = await fetch(`${base}/orders`, {
      method: 'POST',
      headers: { authorization: 'Bearer alice', 'idempotency-key': key, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    })
    const text = await response.text()
    return {
      status: response.status,
      replayed: response.headers.get('idempotent-replayed'),
      text,
      headers: response.headers,
    }
  }

  it('answers the first request 201, the same request the replay, and another body with that key 422', async () => {
    const key = randomUUID()

    const first = await order(key, { item: 'book', qty: 1 })
    const again = await order(key, { item: 'book', qty: 1 })
    const other = await order(key, { item: 'book', qty: 2 })

    expect(first.status, output).toBe(201)
    expect(first.replayed).toBeNull()
    expect(first.headers.get('location')).toBe(`/orders/${JSON.parse(first.text).id}`)
    expect(again).toMatchObject({ status: 201, replayed: 'true', text: first.text })
    expect(again.headers.get('location')).toBe(first.headers.get('location'))
    expect(other.status).toBe(422)
    expect(JSON.parse(other.text)).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' })
  })

  it('answers 409 to a retry while the first request runs, and the replay once it has answered', async () => {
    const key = randomUUID()
    const slow = { item: 'lamp', qty: 1, delayMs: 3_000 }

    // Whichever of the two claims the key first runs; the other finds it running.
    const first = order(key, slow)
    await sleep(500)
    const during = await order(key, slow)
    const answers = [await first, during]
    const after = await order(key, slow)

    expect(answers.map((answer) => answer.status).sort()).toEqual([201, 409])
    const conflict = answers.find((answer) => answer.status === 409)
    expect(JSON.parse(conflict?.text ?? '{}')).toMatchObject({ code: 'IDEMPOTENCY_IN_FLIGHT' })
    expect(conflict?.headers.get('retry-after')).toMatch(/^\d+$/)
    expect(after).toMatchObject({ status: 201, replayed: 'true', text: answers.find((a) => a.status === 201)?.text })
  })

  it('answers 400 IDEMPOTENCY_KEY_MISSING to a request without a key', async () => {
    const response = await fetch(`${base}/orders`, {
      method: 'POST',
      headers: { authorization: 'Bearer alice', 'content-type': 'application/json' },
      body: JSON.stringify({ item: 'book', qty: 1 }),
    })

    expect(response.status).toBe(400)
    expect(await response.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' })
  })
})
