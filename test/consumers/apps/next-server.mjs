// Serves the route file (app/orders/route.mjs) on node:http the way `next start` calls a route
// handler: a Fetch Request in, its Response written out. Prints `listening <port>`.
import { createServer } from 'node:http'
import { POST } from './app/orders/route.mjs'

const server = createServer(async (req, res) => {
  const chunks = []
  for await (const chunk of req) chunks.push(chunk)
  const headers = new Headers()
  for (const [name, value] of Object.entries(req.headers)) {
    for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one)
  }
  const request = new Request(`http://${req.headers.host}${req.url}`, {
    method: req.method,
    headers,
    body: chunks.length > 0 ? Buffer.concat(chunks) : undefined,
  })
  const response =
    req.method === 'POST' && req.url === '/orders'
      ? await POST(request, { params: Promise.resolve({}) })
      : new Response(null, { status: 404 })
  res.writeHead(response.status, Object.fromEntries(response.headers))
  res.end(Buffer.from(await response.arrayBuffer()))
})
server.listen(0, '127.0.0.1', () => {
  console.log(`listening ${server.address().port}`)
})
