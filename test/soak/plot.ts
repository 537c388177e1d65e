/**
 * The soak run's pictures (run.ts), in plain SVG: lines over time, one per series (an instance
 * process, an answer class), each fault's window shaded and labelled, a bound drawn as a dashed
 * line where one applies.
 */
import type { FaultSpan } from './evaluate.js'

export interface Series {
  readonly label: string
  /** [offset ms, value] */
  readonly points: readonly (readonly [number, number])[]
  readonly dashed?: boolean
}

export interface LinePlot {
  readonly title: string
  readonly yLabel: string
  readonly endMs: number
  readonly series: readonly Series[]
  readonly faults: readonly FaultSpan[]
  readonly log?: boolean
  /** A horizontal line (a bound). */
  readonly bound?: { readonly value: number; readonly label: string }
  /** Shaded from 0 to this offset: the warm-up. */
  readonly warmupMs?: number
}

const PALETTE = [
  '#1565c0',
  '#2e7d32',
  '#e65100',
  '#6a1b9a',
  '#ad1457',
  '#00838f',
  '#f9a825',
  '#212121',
  '#757575',
  '#d50000',
  '#5d4037',
]
const WIDTH = 1000
const HEIGHT = 380
const LEFT = 70
const RIGHT = 200
const TOP = 40
const BOTTOM = 40
const plotWidth = WIDTH - LEFT - RIGHT
const plotHeight = HEIGHT - TOP - BOTTOM
const xml = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;')

const niceStep = (range: number) => {
  const raw = range / 5
  const power = 10 ** Math.floor(Math.log10(raw || 1))
  const scaled = raw / power
  return (scaled <= 1 ? 1 : scaled <= 2 ? 2 : scaled <= 5 ? 5 : 10) * power
}

export function linePlot(plot: LinePlot): string {
  const { endMs, faults } = plot
  const values = plot.series.flatMap((series) => series.points.map(([, value]) => value))
  if (plot.bound) values.push(plot.bound.value)
  const maxValue = Math.max(plot.log ? 10 : 1, ...values) * 1.1
  const x = (ms: number) => LEFT + (Math.min(ms, endMs) / endMs) * plotWidth
  const y = plot.log
    ? (value: number) => TOP + plotHeight - (Math.log10(Math.max(1, value)) / Math.log10(maxValue)) * plotHeight
    : (value: number) => TOP + plotHeight - (value / maxValue) * plotHeight
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="sans-serif" font-size="11">`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="white"/>`,
    `<text x="${LEFT}" y="18" font-size="14">${xml(plot.title)}</text>`,
  ]
  if (plot.warmupMs)
    parts.push(
      `<rect x="${LEFT}" y="${TOP}" width="${(x(plot.warmupMs) - LEFT).toFixed(1)}" height="${plotHeight}" fill="#eeeeee"/>`,
      `<text x="${LEFT + 3}" y="${TOP + plotHeight - 4}" font-size="9" fill="#616161">warm-up</text>`,
    )
  faults.forEach((fault, index) => {
    const from = x(fault.start)
    const width = Math.max(2, x(fault.end) - from)
    parts.push(
      `<rect x="${from.toFixed(1)}" y="${TOP}" width="${width.toFixed(1)}" height="${plotHeight}" fill="#ef9a9a" fill-opacity="0.35"/>`,
      `<text x="${(from + 2).toFixed(1)}" y="${TOP + 10 + (index % 3) * 11}" font-size="9" fill="#b71c1c">${xml(`${fault.kind}${fault.instance === undefined ? '' : ` i${fault.instance}`}`)}</text>`,
    )
  })
  parts.push(`<rect x="${LEFT}" y="${TOP}" width="${plotWidth}" height="${plotHeight}" fill="none" stroke="#444"/>`)
  const step = endMs > 1_200_000 ? 300_000 : endMs > 300_000 ? 60_000 : endMs > 60_000 ? 20_000 : 5_000
  for (let ms = 0; ms <= endMs; ms += step) {
    parts.push(
      `<line x1="${x(ms).toFixed(1)}" y1="${TOP + plotHeight}" x2="${x(ms).toFixed(1)}" y2="${TOP + plotHeight + 4}" stroke="#444"/>`,
      `<text x="${x(ms).toFixed(1)}" y="${TOP + plotHeight + 16}" text-anchor="middle">${step >= 60_000 ? `${ms / 60_000} min` : `${ms / 1_000} s`}</text>`,
    )
  }
  const ticks: number[] = []
  if (plot.log) for (let decade = 1; decade <= maxValue; decade *= 10) ticks.push(decade)
  else for (let value = 0, tick = niceStep(maxValue); value <= maxValue; value += tick) ticks.push(value)
  for (const value of ticks) {
    parts.push(
      `<line x1="${LEFT - 4}" y1="${y(value).toFixed(1)}" x2="${LEFT + plotWidth}" y2="${y(value).toFixed(1)}" stroke="#e0e0e0"/>`,
      `<text x="${LEFT - 6}" y="${(y(value) + 4).toFixed(1)}" text-anchor="end">${Number(value.toPrecision(6))}</text>`,
    )
  }
  parts.push(
    `<text x="14" y="${TOP + plotHeight / 2}" transform="rotate(-90 14 ${TOP + plotHeight / 2})" text-anchor="middle">${xml(plot.yLabel)}</text>`,
  )
  if (plot.bound) {
    const at = y(plot.bound.value).toFixed(1)
    parts.push(
      `<line x1="${LEFT}" y1="${at}" x2="${LEFT + plotWidth}" y2="${at}" stroke="#d50000" stroke-dasharray="6 4"/>`,
      `<text x="${LEFT + plotWidth - 4}" y="${(Number(at) - 4).toFixed(1)}" text-anchor="end" fill="#d50000">${xml(plot.bound.label)}</text>`,
    )
  }
  plot.series.forEach((series, index) => {
    const colour = PALETTE[index % PALETTE.length] as string
    const points = series.points.map(([t, value]) => `${x(t).toFixed(1)},${y(value).toFixed(1)}`).join(' ')
    parts.push(
      `<polyline points="${points}" fill="none" stroke="${colour}" stroke-width="1.5"${series.dashed ? ' stroke-dasharray="4 3"' : ''}/>`,
      `<rect x="${WIDTH - RIGHT + 12}" y="${TOP + 2 + index * 16}" width="10" height="10" fill="${colour}"/>`,
      `<text x="${WIDTH - RIGHT + 28}" y="${TOP + 11 + index * 16}">${xml(series.label)}</text>`,
    )
  })
  parts.push('</svg>')
  return `${parts.join('\n')}\n`
}
