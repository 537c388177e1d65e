import { describe, expect, it } from 'vitest'
import { BASELINE, bytes, count, growthRow, parseGrowthArgs, times } from '../../scripts/bench/growth-cases.js'

const sample = (rps: number, p99: number, cpuUs: number, storeCpuUs: number) => ({ rps, p99, cpuUs, storeCpuUs })

describe('the growth bench', () => {
  it('runs every mode and case by default, the baseline first and the fills last in ascending order', () => {
    const options = parseGrowthArgs([])
    expect(options.modes).toEqual(['redis', 'postgres'])
    expect(options.cases[0]).toBe(BASELINE)
    expect(options.cases.map((c) => c.name)).toEqual([
      'baseline',
      'body-64k',
      'body-1m',
      'conn-256',
      'fill-1m',
      'fill-10m',
    ])
    expect(options.cases.map((c) => c.fill).filter((n) => n > 0)).toEqual([1_000_000, 10_000_000])
    expect([options.rounds, options.durationS, options.expiredShare]).toEqual([3, 3, 0.02])
  })

  it('keeps the baseline among the chosen cases, in the cases order, and reads the numbers', () => {
    const options = parseGrowthArgs(['--cases', 'fill-1m,body-64k', '--modes', 'postgres', '--rounds', '5', '--quick'])
    expect(options.cases.map((c) => c.name)).toEqual(['baseline', 'body-64k', 'fill-1m'])
    expect(options.modes).toEqual(['postgres'])
    expect(options.rounds).toBe(5)
    expect(options.durationS).toBe(0.5)
    const body = options.cases[1]
    expect([body?.bodyBytes, body?.connections, body?.fill]).toEqual([65_536, 32, 0])
  })

  it('refuses a case, a mode or a number it does not know', () => {
    expect(() => parseGrowthArgs(['--cases', 'body-2m'])).toThrow(/unknown body-2m/)
    expect(() => parseGrowthArgs(['--modes', 'memory'])).toThrow(/unknown memory/)
    expect(() => parseGrowthArgs(['--rounds', '0'])).toThrow(/--rounds/)
    expect(() => parseGrowthArgs(['--expired', '2'])).toThrow(/--expired/)
  })

  it('compares the medians of a case with the medians of the baseline', () => {
    const baseline = [sample(1000, 50, 300, 60), sample(900, 70, 320, 40), sample(1100, 60, 280, 50)]
    const runs = [sample(250, 200, 1200, 500), sample(200, 100, 900, 800)]
    const row = growthRow(runs, baseline)
    expect(row.median).toEqual(sample(225, 150, 1050, 650))
    expect(row.ratio.rps).toBeCloseTo(0.225, 6)
    expect(row.ratio.p99).toBeCloseTo(2.5, 6)
    expect(row.ratio.cpuUs).toBeCloseTo(3.5, 6)
    expect(row.ratio.storeCpuUs).toBeCloseTo(13, 6)
    expect(times(row.ratio.cpuUs)).toBe('3.50×')
  })

  it('prints no ratio against a baseline figure of 0', () => {
    const row = growthRow([sample(10, 1, 1, 5)], [sample(10, 1, 1, 0)])
    expect(row.ratio.storeCpuUs).toBeNaN()
    expect(times(row.ratio.storeCpuUs)).toBe('-')
  })

  it('writes sizes and counts short', () => {
    expect([bytes(812), bytes(67_686), bytes(1_080_000)]).toEqual(['812 B', '66.1 KiB', '1.03 MiB'])
    expect([count(1_000_000), count(10_000_000), count(250_000), count(1234)]).toEqual(['1 M', '10 M', '250 k', '1234'])
  })
})
