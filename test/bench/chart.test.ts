import { describe, expect, it } from 'vitest'
import { benchChart } from '../../scripts/bench/chart.js'

/** The bars of a chart: their tooltip text and height, in document order. */
function bars(svg: string): { tip: string; height: number }[] {
  return [...svg.matchAll(/<rect [^>]*height="([\d.]+)"[^>]*><title>([^<]*)<\/title>/g)].map((m) => ({
    tip: m[2] as string,
    height: Number(m[1]),
  }))
}

describe('the bench chart', () => {
  const rows = [
    { scenario: 'first', server: 'bare', rps: 6000, serverCpuUs: 50, storeCpuUs: 0 },
    { scenario: 'first', server: 'redis', rps: 3000, serverCpuUs: 100, storeCpuUs: 40 },
    { scenario: 'first', server: 'postgres', rps: 500, serverCpuUs: 5000, storeCpuUs: 9000 },
    { scenario: 'replay', server: 'redis', rps: 1500, serverCpuUs: 80, storeCpuUs: 20 },
  ]
  const svg = benchChart('fastify <run>', rows, ['bare', 'floor', 'redis', 'postgres'])

  it('draws req/s bars in proportion, in the servers order, with every scenario', () => {
    const rps = bars(svg).filter((bar) => !bar.tip.includes('store') && Number(bar.tip.split(': ')[1]) >= 500)
    const height = (tip: string) => rps.find((bar) => bar.tip === tip)?.height ?? Number.NaN
    expect(height('bare first: 6000') / height('redis first: 3000')).toBeCloseTo(2, 1)
    expect(height('redis first: 3000') / height('redis replay: 1500')).toBeCloseTo(2, 1)
    expect(svg.indexOf('bare first')).toBeLessThan(svg.indexOf('redis first'))
    expect(svg).toContain('>replay</text>')
  })

  it('cuts an outlier CPU bar at the axis and labels it with its value, and escapes text', () => {
    const cpu = bars(svg).filter((bar) => bar.tip.startsWith('postgres first'))
    const total = cpu.filter((bar) => bar.tip.includes(': 5000') || bar.tip.includes('store: 9000'))
    expect(total).toHaveLength(2)
    const redisCpu = bars(svg).find((bar) => bar.tip === 'redis first: 100')?.height ?? 0
    // Drawn, the outlier is no taller than the axis: far less than 140 times the redis bar.
    expect(total.reduce((sum, bar) => sum + bar.height, 0)).toBeLessThan(redisCpu * 20)
    expect(svg).toContain('>14000</text>')
    expect(svg).toContain('fastify &lt;run&gt;')
    expect(svg).not.toContain('>floor</text>')
  })
})
