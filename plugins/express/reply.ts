/**
 * Sends the layer's own answers on Express: a replayed response or a problem+json, without
 * running the handler.
 */
import type { ServerResponse } from 'node:http'
import type { HttpResponse } from '../../src/http/problem.js'

/** Ends `res` with `response`; headers set earlier (by other middleware) stay. */
export function sendResponse(res: ServerResponse, response: HttpResponse): void {
  res.statusCode = response.status
  for (const [name, value] of Object.entries(response.headers)) res.setHeader(name, value)
  res.end(response.body)
}
