// A Koa 2 app in plain CommonJS with @koa/router and @koa/bodyparser, as a user writes it from
// the docs: nothing installed but those and idemkit (no ioredis, no pg, no TypeScript). Prints
// `listening <port>`.
const Koa = require('koa')
const Router = require('@koa/router')
const { bodyParser } = require('@koa/bodyparser')
const idempotency = require('idemkit/koa')
const { memoryStore } = require('idemkit/koa')

if (require('idemkit/koa').idempotency !== require('idemkit/koa').default) {
  throw new Error('idemkit/koa: .idempotency and .default are different functions')
}
const idem = idempotency({
  store: memoryStore(),
  secrets: { current: 1, keys: { 1: 'consumer-secret-'.repeat(2) } },
  anonymous: true,
})
const app = new Koa()
const router = new Router()
let orders = 0
router.post('/orders', idem(), (ctx) => {
  if (ctx.state.idempotency === null) throw new Error('the handler ran unprotected')
  orders += 1
  ctx.status = 201
  ctx.body = { order: orders, ...ctx.request.body }
})
app.use(bodyParser())
app.use(router.routes())
const server = app.listen(0, '127.0.0.1', () => {
  console.log(`listening ${server.address().port}`)
})
