/**
 * The chart `npm run bench` writes per framework: for every scenario, one bar per server (bare,
 * the floors, the layer on each store, the peers) for its requests per second, and below it one
 * bar per server for its CPU time per request, the server's with the store's stacked on top.
 * Plain SVG, no dependency: the benchmark page shows it above its tables.
 */

/** One measured server in one scenario: medians over rounds. */
export interface ChartRow {
  readonly scenario: string
  readonly server: string
  readonly rps: number
  readonly serverCpuUs: number
  readonly storeCpuUs: number
}

/** One colour per server, in the order servers are listed; the peers in greys and browns. */
const COLOURS: Record<string, string> = {
  bare: '#9e9e9e',
  floor: '#cfd8dc',
  'floor-corked': '#90a4ae',
  'floor-node-redis': '#b0bec5',
  store: '#80cbc4',
  redis: '#00897b',
  'redis-no-timeout': '#26a69a',
  'redis-cache': '#004d40',
  'redis-one-command': '#80cbc4',
  'redis-baseline': '#a5d6a7',
  memory: '#4db6ac',
  'pg-floor': '#9fa8da',
  'pg-rows': '#7986cb',
  postgres: '#3949ab',
  'node-idempotency': '#e65100',
  powertools: '#f9a825',
  'express-idempotency': '#8d6e63',
}
const colourOf = (server: string) => COLOURS[server] ?? '#616161'

const xml = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')

/** A round axis maximum (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten) at or above `value`. */
function niceMax(value: number): number {
  if (value <= 0) return 1
  const power = 10 ** Math.floor(Math.log10(value))
  for (const step of [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (step * power >= value) return step * power
  return 10 * power
}

/**
 * The SVG for one framework's rows. Scenarios keep the order of their first row, servers the
 * order of `servers`.
 */
export function benchChart(title: string, rows: readonly ChartRow[], servers: readonly string[]): string {
  const scenarios = [...new Set(rows.map((row) => row.scenario))]
  const present = servers.filter((server) => rows.some((row) => row.server === server))
  const find = (scenario: string, server: string) =>
    rows.find((row) => row.scenario === scenario && row.server === server)
  const bar = 12
  const gap = 18
  const groupWidth = (scenario: string) => present.filter((server) => find(scenario, server)).length * bar
  const left = 64
  const panel = 190
  const top = 50
  const width = left + scenarios.reduce((sum, scenario) => sum + groupWidth(scenario) + gap, 0) + 20
  const legendTop = top + 2 * panel + 70
  const perLegendRow = Math.max(1, Math.floor((width - left) / 140))
  const legendRows = Math.ceil(present.length / perLegendRow)
  const height = legendTop + legendRows * 18 + 10
  const rpsMax = niceMax(Math.max(...rows.map((row) => row.rps)))
  // A few servers' CPU (PostgreSQL's first executions) would flatten every other bar: the axis
  // stops at four times the median total, and a bar above it is cut and labelled with its value.
  const totals = rows.map((row) => row.serverCpuUs + row.storeCpuUs).sort((a, b) => a - b)
  const cpuMax = niceMax(Math.min(totals.at(-1) ?? 1, 4 * (totals[Math.floor(totals.length / 2)] ?? 1)))
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="#ffffff"/>`,
    `<text x="${left}" y="20" font-size="14" font-weight="bold">${xml(title)}</text>`,
  ]
  const panels = [
    { label: 'requests/s', max: rpsMax, y0: top + panel, value: (row: ChartRow) => [row.rps] },
    {
      label: 'CPU µs/request (server, store on top)',
      max: cpuMax,
      y0: top + 2 * panel + 30,
      value: (row: ChartRow) => [row.serverCpuUs, row.storeCpuUs],
    },
  ]
  for (const { label, max, y0, value } of panels) {
    const scale = (panel - 20) / max
    out.push(`<text x="8" y="${y0 - panel + 4}" font-weight="bold">${xml(label)}</text>`)
    for (let i = 0; i <= 4; i++) {
      const y = y0 - (i * (panel - 20)) / 4
      out.push(`<line x1="${left - 4}" x2="${width - 10}" y1="${y}" y2="${y}" stroke="#eeeeee"/>`)
      out.push(`<text x="${left - 6}" y="${y + 4}" text-anchor="end">${Math.round((i * max) / 4)}</text>`)
    }
    let x = left
    for (const scenario of scenarios) {
      const start = x
      for (const server of present) {
        const row = find(scenario, server)
        if (!row) continue
        let y = y0
        const parts = value(row)
        parts.forEach((part, index) => {
          const h = Math.max(0, Math.min(part * scale, y - (y0 - (panel - 20))))
          y -= h
          const fill = index === 0 ? colourOf(server) : '#424242'
          const tip =
            index === 0
              ? `${server} ${scenario}: ${Math.round(part)}`
              : `${server} ${scenario} store: ${Math.round(part)}`
          out.push(
            `<rect x="${x}" y="${y.toFixed(1)}" width="${bar - 1}" height="${h.toFixed(1)}" fill="${fill}"><title>${xml(tip)}</title></rect>`,
          )
        })
        const total = parts.reduce((sum, part) => sum + part, 0)
        if (total > max) {
          out.push(
            `<text x="${x + bar / 2}" y="${y0 - (panel - 20) - 3}" text-anchor="middle" font-size="9">${Math.round(total)}</text>`,
          )
        }
        x += bar
      }
      out.push(`<text x="${(start + x) / 2}" y="${y0 + 14}" text-anchor="middle">${xml(scenario)}</text>`)
      x += gap
    }
  }
  present.forEach((server, index) => {
    const x = left + (index % perLegendRow) * 140
    const y = legendTop + Math.floor(index / perLegendRow) * 18
    out.push(`<rect x="${x}" y="${y - 10}" width="12" height="12" fill="${colourOf(server)}"/>`)
    out.push(`<text x="${x + 16}" y="${y}">${xml(server)}</text>`)
  })
  out.push('</svg>')
  return `${out.join('\n')}\n`
}
