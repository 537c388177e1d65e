/**
 * The run's pictures, as Jepsen draws them, in plain SVG: the latency of every request over
 * time coloured by its answer, and the answers per second by kind; each fault's window is
 * shaded and labelled on both.
 */
import { answerLabel } from './checker.js'
import type { AppliedFault, Operation } from './history.js'

const COLOURS: Record<string, string> = {
  '201': '#2e7d32',
  replay: '#1565c0',
  '409': '#f9a825',
  '422': '#6a1b9a',
  '503 unavailable': '#e65100',
  '503 handler': '#ff8a65',
  '503 recovery': '#ad1457',
  timeout: '#212121',
  error: '#757575',
}
const colour = (label: string) => COLOURS[label] ?? '#d50000'
const WIDTH = 1000
const HEIGHT = 420
const LEFT = 60
const RIGHT = 150
const TOP = 40
const BOTTOM = 40
const plotWidth = WIDTH - LEFT - RIGHT
const plotHeight = HEIGHT - TOP - BOTTOM
const xml = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;')

function frame(title: string, endMs: number, faults: readonly AppliedFault[], yLabel: string): string[] {
  const x = (ms: number) => LEFT + (ms / endMs) * plotWidth
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="sans-serif" font-size="11">`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="white"/>`,
    `<text x="${LEFT}" y="18" font-size="14">${xml(title)}</text>`,
  ]
  faults.forEach((fault, index) => {
    const from = x(fault.start)
    const width = Math.max(2, x(fault.end) - from)
    parts.push(
      `<rect x="${from.toFixed(1)}" y="${TOP}" width="${width.toFixed(1)}" height="${plotHeight}" fill="#ef9a9a" fill-opacity="0.25"/>`,
    )
    const label = `${fault.kind}${fault.instance === undefined ? '' : ` i${fault.instance}`}`
    const y = TOP + 10 + (index % 4) * 11
    parts.push(`<text x="${(from + 2).toFixed(1)}" y="${y}" font-size="9" fill="#b71c1c">${xml(label)}</text>`)
  })
  parts.push(`<rect x="${LEFT}" y="${TOP}" width="${plotWidth}" height="${plotHeight}" fill="none" stroke="#444"/>`)
  const step = endMs > 120_000 ? 30_000 : endMs > 40_000 ? 10_000 : 5_000
  for (let ms = 0; ms <= endMs; ms += step) {
    parts.push(
      `<line x1="${x(ms).toFixed(1)}" y1="${TOP + plotHeight}" x2="${x(ms).toFixed(1)}" y2="${TOP + plotHeight + 4}" stroke="#444"/>`,
    )
    parts.push(`<text x="${x(ms).toFixed(1)}" y="${TOP + plotHeight + 16}" text-anchor="middle">${ms / 1_000}</text>`)
  }
  parts.push(`<text x="${LEFT + plotWidth / 2}" y="${HEIGHT - 6}" text-anchor="middle">time (s)</text>`)
  parts.push(
    `<text x="14" y="${TOP + plotHeight / 2}" transform="rotate(-90 14 ${TOP + plotHeight / 2})" text-anchor="middle">${xml(yLabel)}</text>`,
  )
  return parts
}

function legend(labels: readonly string[], counts: Record<string, number>): string[] {
  return labels.flatMap((label, index) => {
    const y = TOP + 10 + index * 16
    return [
      `<rect x="${WIDTH - RIGHT + 12}" y="${y - 8}" width="10" height="10" fill="${colour(label)}"/>`,
      `<text x="${WIDTH - RIGHT + 28}" y="${y + 1}">${xml(label)} (${counts[label] ?? 0})</text>`,
    ]
  })
}

function labelsOf(operations: readonly Operation[]): { labels: string[]; counts: Record<string, number> } {
  const counts: Record<string, number> = {}
  for (const operation of operations) {
    const label = answerLabel(operation)
    counts[label] = (counts[label] ?? 0) + 1
  }
  const order = Object.keys(COLOURS)
  const labels = Object.keys(counts).sort((a, b) => ((order.indexOf(a) + 100) % 100) - ((order.indexOf(b) + 100) % 100))
  return { labels, counts }
}

/** Latency (log scale, ms) of every request against its start time. */
export function latencyPlot(operations: readonly Operation[], faults: readonly AppliedFault[], title: string): string {
  const endMs = Math.max(1_000, ...operations.map((operation) => operation.end), ...faults.map((fault) => fault.end))
  const maxLatency = Math.max(100, ...operations.map((operation) => operation.end - operation.start))
  const top = Math.log10(maxLatency * 1.2)
  const x = (ms: number) => LEFT + (ms / endMs) * plotWidth
  const y = (latency: number) => TOP + plotHeight - (Math.log10(Math.max(1, latency)) / top) * plotHeight
  const parts = frame(`${title}: latency of every request`, endMs, faults, 'latency (ms, log)')
  for (let decade = 1; decade <= maxLatency * 1.2; decade *= 10) {
    parts.push(
      `<line x1="${LEFT - 4}" y1="${y(decade).toFixed(1)}" x2="${LEFT + plotWidth}" y2="${y(decade).toFixed(1)}" stroke="#ddd"/>`,
    )
    parts.push(`<text x="${LEFT - 6}" y="${(y(decade) + 4).toFixed(1)}" text-anchor="end">${decade}</text>`)
  }
  for (const operation of operations) {
    const label = answerLabel(operation)
    parts.push(
      `<circle cx="${x(operation.start).toFixed(0)}" cy="${y(operation.end - operation.start).toFixed(0)}" r="1.8" fill="${colour(label)}" fill-opacity="0.7"/>`,
    )
  }
  const { labels, counts } = labelsOf(operations)
  parts.push(...legend(labels, counts), '</svg>')
  return `${parts.join('\n')}\n`
}

/** Answers per second by kind (by the time each answer ended). */
export function throughputPlot(
  operations: readonly Operation[],
  faults: readonly AppliedFault[],
  title: string,
): string {
  const endMs = Math.max(1_000, ...operations.map((operation) => operation.end), ...faults.map((fault) => fault.end))
  const bins = Math.ceil(endMs / 1_000)
  const { labels, counts } = labelsOf(operations)
  const series = new Map(labels.map((label) => [label, new Array<number>(bins).fill(0)]))
  for (const operation of operations) {
    const bin = Math.min(bins - 1, Math.floor(operation.end / 1_000))
    const list = series.get(answerLabel(operation)) as number[]
    list[bin] = (list[bin] ?? 0) + 1
  }
  const maxRate = Math.max(1, ...[...series.values()].flat())
  const x = (ms: number) => LEFT + (ms / endMs) * plotWidth
  const y = (rate: number) => TOP + plotHeight - (rate / (maxRate * 1.1)) * plotHeight
  const parts = frame(`${title}: answers per second`, endMs, faults, 'answers per second')
  const tick = Math.max(1, Math.ceil(maxRate / 5))
  for (let rate = 0; rate <= maxRate * 1.1; rate += tick) {
    parts.push(
      `<line x1="${LEFT - 4}" y1="${y(rate).toFixed(1)}" x2="${LEFT + plotWidth}" y2="${y(rate).toFixed(1)}" stroke="#ddd"/>`,
    )
    parts.push(`<text x="${LEFT - 6}" y="${(y(rate) + 4).toFixed(1)}" text-anchor="end">${rate}</text>`)
  }
  for (const [label, list] of series) {
    const points = list.map((rate, bin) => `${x(bin * 1_000 + 500).toFixed(1)},${y(rate).toFixed(1)}`).join(' ')
    parts.push(`<polyline points="${points}" fill="none" stroke="${colour(label)}" stroke-width="1.5"/>`)
  }
  parts.push(...legend(labels, counts), '</svg>')
  return `${parts.join('\n')}\n`
}
