/**
 * The soak run's load (run.ts forks it, so the load has a core's share of its own beside the
 * proxies in the runner): open loop, new keys started at a fixed rate whatever the answers'
 * latency, over many keep-alive connections to the three app instances (undici pools), with
 * retries as a real client makes them. Each key is a short session on POST /orders:
 *
 * - the first request, to a random instance; one key in 30 gets a duplicate at once to another
 *   instance (its handler waits 100 ms, so the duplicate finds it in flight: 409, or the replay);
 * - a 409, 503 store-unavailable, timeout or connection error: the same request again after a
 *   backoff (250 ms × attempt), to a random instance, up to 6 attempts;
 * - after a 2xx: one key in 5 is replayed (the same request, 0-1 s later), one in 50 is sent
 *   again with another body (422 expected).
 *
 * What the volume lets the checker keep is checked here, per key, as the answers come, and the
 * key is dropped when its session ends (the load's memory stays flat): `different-answers` (two
 * 2xx bodies of one key differ), `changed-body-accepted`, `same-body-rejected` (422 to a body
 * never changed), `lost-answer` (after a 2xx, a request sent later with the same body answered
 * 409, 422 or 503 recovery-required) and `undocumented-status` (anything but 201, 409, 422 and
 * 503, each with the layer's own code). The handler executions per key are counted from the apps'
 * execution log after the run (run.ts); hangs against the fault windows there too.
 *
 * Per 10 s window and per answer class: the answers (by when they ended) and p50/p99 latency
 * (of the requests sent in the window); per second: the p99 of every request sent in it, for the
 * recovery after each fault. Messages: `{ type: 'start', ... }` and `{ type: 'urls' }` in,
 * `{ type: 'window' }` and `{ type: 'done' }` out.
 */
import { createHash } from 'node:crypto'
import { Pool } from 'undici'
import { mulberry32 } from '../nemesis/schedule.js'

export const CLIENT_TIMEOUT_MS = 15_000
export const WINDOW_MS = 10_000
const MAX_ATTEMPTS = 6
/** A bin is final once no request sent in it can still be waiting (the client timeout, and slack). */
const SETTLE_MS = CLIENT_TIMEOUT_MS + 5_000

export type AnswerClass =
  | '201'
  | 'replay'
  | '409'
  | '422'
  | '503 unavailable'
  | '503 recovery'
  | '503 other'
  | 'timeout'
  | 'error'
  | 'other'

export interface StartMessage {
  readonly type: 'start'
  readonly urls: readonly (string | undefined)[]
  /** New keys per second. */
  readonly rate: number
  readonly durationMs: number
  readonly seed: number
  /** Epoch ms of offset 0 (the runner's origin). */
  readonly origin: number
  /** Keep-alive connections per instance. */
  readonly connections: number
  /** Requests in flight at most; a new key past it is shed (counted, not sent). */
  readonly maxInFlight: number
}

/** One 10 s window: per class, answers ended in it, and latency of requests sent in it. */
export interface LoadWindow {
  readonly type: 'window'
  /** Offset of the window's start, ms. */
  readonly start: number
  readonly classes: Record<string, { answers: number; sent: number; p50: number; p99: number; max: number }>
  readonly p99: number
  readonly sent: number
  readonly shed: number
}

export interface LoadViolation {
  readonly kind: string
  readonly key: string
  readonly at: number
  readonly detail: string
}

/** A request that took longer than the hang bound, or had no answer: held against the faults by run.ts. */
export interface SlowRequest {
  readonly key: string
  readonly instance: number
  readonly start: number
  readonly end: number
  readonly answer: AnswerClass
}

export interface LoadDone {
  readonly type: 'done'
  readonly keys: number
  readonly requests: number
  readonly shed: number
  readonly counts: Record<string, number>
  /** Keys whose session ended with no 2xx, by why. */
  readonly unanswered: Record<string, number>
  readonly violations: readonly LoadViolation[]
  readonly violationsByKind: Record<string, number>
  readonly slow: readonly SlowRequest[]
  /** Per second since offset 0: p99 (ms) of every request sent in it, and how many (by start). */
  readonly secondP99: readonly (number | null)[]
  readonly secondSent: readonly number[]
  /** The load process's own RSS at the end, and its peak, bytes. */
  readonly rss: number
}

const hash = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 16)

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number
}

interface Answer {
  readonly status: number
  readonly code?: string
  readonly replayed: boolean
  readonly bodyHash?: string
  readonly outcome: 'answer' | 'timeout' | 'error'
}

export function classify(answer: Answer): AnswerClass {
  if (answer.outcome !== 'answer') return answer.outcome
  if (answer.status === 201) return answer.replayed ? 'replay' : '201'
  if (answer.status === 409 && answer.code === 'IDEMPOTENCY_IN_FLIGHT') return '409'
  if (answer.status === 422 && answer.code === 'IDEMPOTENCY_KEY_REUSED') return '422'
  if (answer.status === 503) {
    if (answer.code === 'IDEMPOTENCY_STORE_UNAVAILABLE') return '503 unavailable'
    if (answer.code === 'IDEMPOTENCY_RECOVERY_REQUIRED') return '503 recovery'
    return '503 other'
  }
  return 'other'
}

interface KeyState {
  readonly key: string
  readonly user: string
  readonly body: string
  readonly bodyHash: string
  /** Requests of the session still waiting for their answer, and more planned. */
  pending: number
  ok?: string
  okEnd?: number
  outcome?: string
}

class Load {
  readonly #rng: () => number
  readonly #pools: (Pool | undefined)[] = []
  readonly #urls: (string | undefined)[] = []
  readonly #origin: number
  #inFlight = 0
  #sessions = 0
  #keys = 0
  #requests = 0
  #shed = 0
  readonly counts: Record<string, number> = {}
  readonly unanswered: Record<string, number> = {}
  readonly violations: LoadViolation[] = []
  readonly violationsByKind: Record<string, number> = {}
  readonly slow: SlowRequest[] = []
  /** Per 10 s window: per class, answers ended in it and latencies of the requests sent in it. */
  readonly #windows = new Map<
    number,
    { ended: Record<string, number>; latency: Record<string, number[]>; shed: number }
  >()
  readonly #seconds = new Map<number, number[]>()
  readonly secondP99: (number | null)[] = []
  readonly secondSent: number[] = []

  constructor(readonly options: StartMessage) {
    this.#rng = mulberry32(options.seed)
    this.#origin = options.origin
    this.setUrls(options.urls)
  }

  now(): number {
    return Date.now() - this.#origin
  }

  /** The instances' URLs now; null or undefined while one is down (IPC sends undefined as null). */
  setUrls(urls: readonly (string | null | undefined)[]): void {
    urls.forEach((given, i) => {
      const url = given ?? undefined
      if (url === this.#urls[i]) return
      const old = this.#pools[i]
      this.#urls[i] = url
      this.#pools[i] =
        url === undefined
          ? undefined
          : new Pool(url, {
              connections: this.options.connections,
              headersTimeout: CLIENT_TIMEOUT_MS,
              bodyTimeout: CLIENT_TIMEOUT_MS,
              connectTimeout: 5_000,
            })
      void old?.destroy().catch(() => undefined)
    })
  }

  #window(start: number) {
    const index = Math.floor(start / WINDOW_MS)
    let window = this.#windows.get(index)
    if (window === undefined) {
      window = { ended: {}, latency: {}, shed: 0 }
      this.#windows.set(index, window)
    }
    return window
  }

  #violation(kind: string, state: KeyState, detail: string): void {
    this.violationsByKind[kind] = (this.violationsByKind[kind] ?? 0) + 1
    if (this.violations.length < 200) this.violations.push({ kind, key: state.key, at: this.now(), detail })
  }

  async #send(state: KeyState, instance: number, body = state.body): Promise<Answer & { latency: number }> {
    const start = this.now()
    this.#inFlight++
    this.#requests++
    let answer: Answer
    try {
      const pool = this.#pools[instance]
      if (pool === undefined) throw new Error('instance down')
      const response = await pool.request({
        path: '/orders',
        method: 'POST',
        headers: {
          authorization: `Bearer ${state.user}`,
          'content-type': 'application/json',
          'idempotency-key': state.key,
        },
        body,
      })
      const text = await response.body.text()
      let code: string | undefined
      if (response.statusCode >= 400) {
        try {
          const parsed = JSON.parse(text) as { code?: unknown }
          if (typeof parsed.code === 'string') code = parsed.code
        } catch {
          // not JSON
        }
      }
      answer = {
        status: response.statusCode,
        replayed: response.headers['idempotent-replayed'] === 'true',
        outcome: 'answer',
        ...(code === undefined ? {} : { code }),
        ...(response.statusCode < 300 ? { bodyHash: hash(text) } : {}),
      }
    } catch (error) {
      const name = (error as { code?: string }).code ?? ''
      answer = { status: 0, replayed: false, outcome: /HEADERS_TIMEOUT|BODY_TIMEOUT/.test(name) ? 'timeout' : 'error' }
    } finally {
      this.#inFlight--
    }
    const end = this.now()
    const latency = end - start
    const label = classify(answer)
    this.counts[label] = (this.counts[label] ?? 0) + 1
    const ended = this.#window(end).ended
    ended[label] = (ended[label] ?? 0) + 1
    const latencies = this.#window(start).latency
    const classLatencies = latencies[label] ?? []
    latencies[label] = classLatencies
    classLatencies.push(latency)
    const second = Math.floor(start / 1_000)
    let list = this.#seconds.get(second)
    if (list === undefined) {
      list = []
      this.#seconds.set(second, list)
    }
    list.push(latency)
    if (latency > 12_000 || answer.outcome === 'timeout')
      if (this.slow.length < 5_000) this.slow.push({ key: state.key, instance, start, end, answer: label })
    return { ...answer, latency }
  }

  /** Checks one answer against the key's history; answers the class. */
  #check(state: KeyState, answer: Answer, sentAt: number, changed: boolean): AnswerClass {
    const label = classify(answer)
    if (label === 'other' || label === '503 other')
      this.#violation('undocumented-status', state, `${answer.status} ${answer.code ?? ''}`)
    if (answer.status >= 200 && answer.status < 300) {
      if (changed) this.#violation('changed-body-accepted', state, `${answer.status}`)
      else if (state.ok === undefined) {
        state.ok = answer.bodyHash
        state.okEnd = this.now()
      } else if (state.ok !== answer.bodyHash)
        this.#violation('different-answers', state, `${state.ok} then ${answer.bodyHash}`)
    }
    if (!changed && label === '422') this.#violation('same-body-rejected', state, '422 to the body first sent')
    if (
      !changed &&
      state.okEnd !== undefined &&
      sentAt > state.okEnd &&
      (label === '409' || label === '422' || label === '503 recovery')
    )
      this.#violation('lost-answer', state, `${label} after a 2xx`)
    return label
  }

  #done(state: KeyState): void {
    if (--state.pending > 0) return
    if (state.ok === undefined) {
      const why = state.outcome ?? 'gave up'
      this.unanswered[why] = (this.unanswered[why] ?? 0) + 1
    }
  }

  #pick(except?: number): number {
    const live = [0, 1, 2].filter((i) => i !== except)
    return live[Math.floor(this.#rng() * live.length)] as number
  }

  /** The key's request until it has an answer it keeps (or gives up), with retries. */
  async #attempts(state: KeyState, first: number, duplicate: boolean): Promise<void> {
    this.#sessions++
    try {
      await this.#session(state, first, duplicate)
    } finally {
      this.#sessions--
    }
  }

  async #session(state: KeyState, first: number, duplicate: boolean): Promise<void> {
    let instance = first
    for (let attempt = 1; ; attempt++) {
      const sentAt = this.now()
      const answer = await this.#send(state, instance)
      const label = this.#check(state, answer, sentAt, false)
      if (label === '201' || label === 'replay') break
      if (label === '503 recovery' || label === '422' || label === 'other' || label === '503 other') {
        state.outcome = label
        break
      }
      // The duplicate sent at once finds the first in flight: its 409 is the answer it expects.
      if (duplicate && label === '409') break
      if (attempt >= MAX_ATTEMPTS) {
        state.outcome = `${label} after ${MAX_ATTEMPTS} attempts`
        break
      }
      await sleep(250 * attempt)
      instance = this.#pick()
    }
    if (state.ok !== undefined && !duplicate) {
      // After the 2xx: a replay now and then, a changed body once in a while.
      const r = this.#rng()
      if (r < 0.2) {
        state.pending++
        await sleep(Math.floor(this.#rng() * 1_000))
        const sentAt = this.now()
        this.#check(state, await this.#send(state, this.#pick()), sentAt, false)
        this.#done(state)
      } else if (r < 0.22) {
        state.pending++
        const changed = state.body.replace('"qty":1', '"qty":2')
        const sentAt = this.now()
        this.#check(state, await this.#send(state, this.#pick(), changed), sentAt, true)
        this.#done(state)
      }
    }
    this.#done(state)
  }

  startKey(): void {
    const n = this.#keys++
    const user = `u${n % 8}`
    const duplicate = this.#rng() < 1 / 30
    const body = JSON.stringify({ item: `i${n % 100}`, qty: 1, ...(duplicate ? { delayMs: 100 } : {}) })
    const state: KeyState = {
      key: `s${this.options.seed}-${n}`,
      user,
      body,
      bodyHash: hash(body),
      pending: duplicate ? 2 : 1,
    }
    const first = this.#pick()
    void this.#attempts(state, first, false)
    if (duplicate) void this.#attempts(state, this.#pick(first), true)
  }

  shed(): void {
    this.#shed++
    this.#window(this.now()).shed++
  }

  get inFlight(): number {
    return this.#inFlight
  }

  /** Keys whose session has not ended (in flight, or waiting to retry or replay). */
  get sessions(): number {
    return this.#sessions
  }

  /** The windows and seconds no request can still land in, summed up and dropped. */
  flush(final: boolean): LoadWindow[] {
    const now = this.now()
    const out: LoadWindow[] = []
    for (const [index, window] of [...this.#windows].sort(([a], [b]) => a - b)) {
      if (!final && (index + 1) * WINDOW_MS + SETTLE_MS > now) continue
      this.#windows.delete(index)
      const classes: LoadWindow['classes'] = {}
      const all: number[] = []
      const labels = new Set([...Object.keys(window.ended), ...Object.keys(window.latency)])
      let sent = 0
      for (const label of labels) {
        const latencies = (window.latency[label] ?? []).sort((a, b) => a - b)
        all.push(...latencies)
        sent += latencies.length
        classes[label] = {
          answers: window.ended[label] ?? 0,
          sent: latencies.length,
          p50: percentile(latencies, 50),
          p99: percentile(latencies, 99),
          max: latencies[latencies.length - 1] ?? 0,
        }
      }
      all.sort((a, b) => a - b)
      out.push({ type: 'window', start: index * WINDOW_MS, classes, p99: percentile(all, 99), sent, shed: window.shed })
    }
    for (const [second, list] of [...this.#seconds].sort(([a], [b]) => a - b)) {
      if (!final && (second + 1) * 1_000 + SETTLE_MS > now) continue
      this.#seconds.delete(second)
      list.sort((a, b) => a - b)
      while (this.secondP99.length < second) {
        this.secondP99.push(null)
        this.secondSent.push(0)
      }
      this.secondP99[second] = percentile(list, 99)
      this.secondSent[second] = list.length
    }
    return out
  }

  result(): LoadDone {
    return {
      type: 'done',
      keys: this.#keys,
      requests: this.#requests,
      shed: this.#shed,
      counts: this.counts,
      unanswered: this.unanswered,
      violations: this.violations,
      violationsByKind: this.violationsByKind,
      slow: this.slow,
      secondP99: this.secondP99,
      secondSent: this.secondSent,
      rss: process.memoryUsage().rss,
    }
  }

  async close(): Promise<void> {
    for (const pool of this.#pools) await pool?.destroy().catch(() => undefined)
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)))

async function run(options: StartMessage): Promise<void> {
  const load = new Load(options)
  process.on('message', (message: { type: string; urls?: (string | null)[] }) => {
    if (message.type === 'urls' && message.urls) load.setUrls(message.urls)
  })
  const send = (message: unknown) => process.send?.(message)
  const flusher = setInterval(() => {
    for (const window of load.flush(false)) send(window)
  }, 1_000)
  // Open loop: every 5 ms, the keys due by now at `rate` per second, whatever is in flight.
  let started = 0
  await new Promise<void>((resolve) => {
    const tick = setInterval(() => {
      const elapsed = load.now()
      if (elapsed >= options.durationMs) {
        clearInterval(tick)
        resolve()
        return
      }
      const due = Math.floor((elapsed / 1_000) * options.rate)
      for (; started < due; started++) {
        if (load.inFlight >= options.maxInFlight) load.shed()
        else load.startKey()
      }
    }, 5)
  })
  // Every session ends within its attempts' timeouts and backoffs.
  const deadline = Date.now() + MAX_ATTEMPTS * (CLIENT_TIMEOUT_MS + 2_000)
  while (load.sessions > 0 && Date.now() < deadline) await sleep(100)
  await sleep(1_500)
  clearInterval(flusher)
  for (const window of load.flush(true)) send(window)
  send(load.result())
  await load.close()
}

process.once('message', (message: StartMessage) => {
  if (message.type !== 'start') return
  run(message).then(
    () => process.disconnect?.(),
    (error) => {
      console.error(error)
      process.exit(2)
    },
  )
})
