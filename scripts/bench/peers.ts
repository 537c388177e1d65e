/**
 * The peers `npm run bench` measures beside this library, each wired the way its own
 * documentation and adapters show, around the same handler and against the same Redis:
 *
 * - `@node-idempotency/core` with `@node-idempotency/storage-adapter-redis`: its Fastify and
 *   Express adapters (in its repository, not on npm) call `onRequest` before the handler and
 *   `onResponse` with the response; here the same calls, in the same hooks. One `SET NX` per
 *   new request, a `GET` after it for a duplicate, a plain `SET` for the response.
 * - AWS Powertools idempotency (`makeIdempotent` with its `CachePersistenceLayer` on an
 *   `@redis/client` client), called from the route, keyed by the Idempotency-Key
 *   (`eventKeyJmesPath`), the body validated (`payloadValidationJmesPath`), and a Lambda-style
 *   context that gives every call 30 s (outside Lambda, without one, an in-progress record has
 *   no expiry and a duplicate takes it over as an orphan).
 * - `express-idempotency` (Express only), with its default in-memory data adapter: it has no
 *   Redis adapter; it is compared with this library's memory store.
 */
import type { Express, NextFunction, Request, Response } from 'express'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'

/** The handler every server runs: `(route, holdMs) => body`. */
export type Handle = (route: string, holdMs: number) => Promise<{ ok: true; n: number }>

/** The peers measured, with the frameworks each is wired for. */
export const PEERS = {
  'node-idempotency': ['fastify', 'express'],
  powertools: ['fastify', 'express'],
  'express-idempotency': ['express'],
} as const
export type Peer = keyof typeof PEERS

/** The store each peer keeps its records in: what its row is compared with. */
export const PEER_STORE: Readonly<Record<Peer, 'redis' | 'memory'>> = {
  'node-idempotency': 'redis',
  powertools: 'redis',
  'express-idempotency': 'memory',
}

interface NodeIdempotencyError extends Error {
  code: string
}

/** `@node-idempotency/core` on its Redis adapter, connected to `url`. */
async function nodeIdempotency(url: string) {
  const { Idempotency, IdempotencyError, IdempotencyErrorCodes } = await import('@node-idempotency/core')
  const { RedisStorageAdapter } = await import('@node-idempotency/storage-adapter-redis')
  const storage = new RedisStorageAdapter({ url })
  await storage.connect()
  const idempotency = new Idempotency(storage, { enforceIdempotency: true })
  // Its own status map (`idempotency2HttpCodeMap` in its shared package).
  const status = (error: NodeIdempotencyError): number =>
    error.code === IdempotencyErrorCodes.REQUEST_IN_PROGRESS
      ? 409
      : error.code === IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH
        ? 422
        : 400
  return { idempotency, IdempotencyError, status }
}

/** Powertools' `makeIdempotent` per route, on `CachePersistenceLayer` with `@redis/client`. */
async function powertools(url: string, routes: readonly string[], handle: Handle) {
  const { makeIdempotent, IdempotencyConfig, IdempotencyAlreadyInProgressError, IdempotencyValidationError } =
    await import('@aws-lambda-powertools/idempotency')
  const { CachePersistenceLayer } = await import('@aws-lambda-powertools/idempotency/cache')
  const { createClient } = await import('@redis/client')
  const client = createClient({ url })
  await client.connect()
  const persistenceStore = new CachePersistenceLayer({ client: client as never })
  const lambdaContext = { getRemainingTimeInMillis: () => 30_000 }
  const functions = new Map(
    routes.map((route) => {
      const config = new IdempotencyConfig({
        eventKeyJmesPath: 'key',
        payloadValidationJmesPath: 'body',
        expiresAfterSeconds: 86_400,
      })
      const run = async (event: { key: string; body: unknown; holdMs: number }) => handle(route, event.holdMs)
      Object.defineProperty(run, 'name', { value: `route_${route}` })
      return [route, makeIdempotent(run, { persistenceStore, config })] as const
    }),
  )
  /** The route's answer: status and body. */
  return async (
    route: string,
    key: string,
    body: unknown,
    holdMs: number,
  ): Promise<{ status: number; body: unknown }> => {
    const run = functions.get(route) as (event: unknown, context: unknown) => Promise<unknown>
    try {
      return { status: 201, body: await run({ key, body, holdMs }, lambdaContext) }
    } catch (error) {
      if (error instanceof IdempotencyAlreadyInProgressError) return { status: 409, body: { error: 'in progress' } }
      if (error instanceof IdempotencyValidationError) return { status: 422, body: { error: 'key reused' } }
      throw error
    }
  }
}

/** Wires `peer` into a Fastify app for `routes`. */
export async function fastifyPeer(
  app: FastifyInstance,
  peer: Peer,
  url: string,
  routes: readonly string[],
  handle: Handle,
) {
  if (peer === 'node-idempotency') {
    const { idempotency, IdempotencyError, status } = await nodeIdempotency(url)
    const params = (request: FastifyRequest) => ({
      headers: request.headers,
      body: request.body as Record<string, unknown>,
      path: request.url,
      method: request.method,
    })
    // As its Fastify adapter: onRequest in preHandler (a stored answer is sent from there),
    // onResponse in onSend, awaited, with the status and content type.
    const preHandler = async (request: FastifyRequest, reply: FastifyReply) => {
      try {
        const stored = await idempotency.onRequest(params(request))
        if (stored === undefined) return
        reply.code((stored.additional?.statusCode as number) ?? 200).header('idempotent-replayed', 'true')
        return reply.send(stored.body ?? stored.error)
      } catch (error) {
        if (error instanceof IdempotencyError) {
          return reply.code(status(error as NodeIdempotencyError)).send({ error: (error as Error).message })
        }
        throw error
      }
    }
    const onSend = async (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
      if (reply.getHeader('idempotent-replayed') === 'true' || reply.statusCode === 409 || reply.statusCode === 422) {
        return payload
      }
      const additional = { statusCode: reply.statusCode, 'Content-Type': reply.getHeader('content-type') }
      await idempotency.onResponse(params(request), {
        additional,
        ...(reply.statusCode < 400 ? { body: payload } : { error: payload }),
      })
      return payload
    }
    for (const route of routes) {
      app.post(`/${route}`, { preHandler, onSend }, async (request, reply) => {
        const body = await handle(route, Number(request.headers['x-hold-ms'] ?? 0))
        return reply.code(201).send(body)
      })
    }
    return
  }
  if (peer === 'powertools') {
    const answer = await powertools(url, routes, handle)
    for (const route of routes) {
      app.post(`/${route}`, async (request, reply) => {
        const key = String(request.headers['idempotency-key'])
        const result = await answer(route, key, request.body, Number(request.headers['x-hold-ms'] ?? 0))
        return reply.code(result.status).send(result.body)
      })
    }
    return
  }
  throw new Error(`${peer} has no Fastify adapter`)
}

/** Wires `peer` into an Express app for `routes`. */
export async function expressPeer(app: Express, peer: Peer, url: string, routes: readonly string[], handle: Handle) {
  const holdOf = (request: Request) => Number(request.headers['x-hold-ms'] ?? 0)
  if (peer === 'node-idempotency') {
    const { idempotency, IdempotencyError, status } = await nodeIdempotency(url)
    // As its Express adapter: onRequest before the handler; `res.send` wrapped to call
    // onResponse (which the adapter does not wait for before the response leaves).
    const middleware = async (request: Request, response: Response, next: NextFunction) => {
      const params = {
        headers: request.headers,
        body: request.body as Record<string, unknown>,
        path: request.url,
        method: request.method,
      }
      try {
        const stored = await idempotency.onRequest(params)
        if (stored === undefined) {
          const send = response.send.bind(response)
          response.send = (body?: unknown) => {
            const additional = { statusCode: response.statusCode, 'Content-Type': response.getHeader('content-type') }
            const payload = typeof body === 'string' ? (JSON.parse(body) as unknown) : body
            void idempotency.onResponse(params, { additional, body: payload as Record<string, unknown> })
            return send(body)
          }
          next()
          return
        }
        response.status((stored.additional?.statusCode as number) ?? 200).set('idempotent-replayed', 'true')
        response.send(stored.body ?? stored.error)
      } catch (error) {
        if (error instanceof IdempotencyError) {
          response.status(status(error as NodeIdempotencyError)).json({ error: (error as Error).message })
          return
        }
        next(error)
      }
    }
    for (const route of routes) {
      app.post(`/${route}`, middleware, async (request, response) => {
        response.status(201).json(await handle(route, holdOf(request)))
      })
    }
    return
  }
  if (peer === 'powertools') {
    const answer = await powertools(url, routes, handle)
    for (const route of routes) {
      app.post(`/${route}`, async (request, response) => {
        const key = String(request.headers['idempotency-key'])
        const result = await answer(route, key, request.body, holdOf(request))
        response.status(result.status).json(result.body)
      })
    }
    return
  }
  // express-idempotency: its middleware, and the route checks `isHit` as its README shows.
  const { idempotency, getSharedIdempotencyService } = await import('express-idempotency')
  for (const route of routes) {
    app.post(`/${route}`, idempotency(), async (request, response) => {
      if (getSharedIdempotencyService().isHit(request)) return
      response.status(201).json(await handle(route, holdOf(request)))
    })
  }
}
