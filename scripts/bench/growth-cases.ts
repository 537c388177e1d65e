/**
 * The cases of `npm run bench:growth` (growth.ts) and what it prints, apart from the servers so
 * that they can be tested: which case changes what against the baseline (a 1 KiB response, 32
 * connections, an empty store), the options, and the ratios of a case's figures to the baseline's.
 */
import { median, option } from './common.js'

export interface GrowthCase {
  readonly name: string
  /** The JSON body the handler answers, in bytes: the stored response's size. */
  readonly bodyBytes: number
  /** autocannon's connections. */
  readonly connections: number
  /** Records (Redis) or rows (PostgreSQL) the store holds before the case's runs: 0 for an emptied store. */
  readonly fill: number
}

export const BASELINE: GrowthCase = { name: 'baseline', bodyBytes: 1024, connections: 32, fill: 0 }

/** Every case, the baseline first; the fills last, in ascending order (a fill cannot be undone). */
export const CASES: readonly GrowthCase[] = [
  BASELINE,
  { ...BASELINE, name: 'body-64k', bodyBytes: 64 * 1024 },
  { ...BASELINE, name: 'body-1m', bodyBytes: 1024 * 1024 },
  { ...BASELINE, name: 'conn-256', connections: 256 },
  { ...BASELINE, name: 'fill-1m', fill: 1_000_000 },
  { ...BASELINE, name: 'fill-10m', fill: 10_000_000 },
]

export const GROWTH_MODES = ['redis', 'postgres'] as const
export type GrowthMode = (typeof GROWTH_MODES)[number]

export interface GrowthOptions {
  readonly modes: readonly GrowthMode[]
  /** The cases to run, in CASES order, the baseline always among them. */
  readonly cases: readonly GrowthCase[]
  readonly rounds: number
  readonly durationS: number
  /** The share of preloaded PostgreSQL rows already expired, for the sweeper (0.02). */
  readonly expiredShare: number
  readonly quick: boolean
}

/**
 * Reads `--modes redis,postgres`, `--cases body-64k,fill-1m` (the baseline is always run, first),
 * `--rounds R` (3; 1 with `--quick`), `--duration S` (3; 0.5 with `--quick`), `--expired 0.02`.
 * Throws on a mode or case it does not know.
 */
export function parseGrowthArgs(args: readonly string[]): GrowthOptions {
  const quick = args.includes('--quick')
  const list = (name: string, all: readonly string[]) => {
    const names = option(name, all.join(','), args).split(',').filter(Boolean)
    const unknown = names.filter((n) => !all.includes(n))
    if (unknown.length > 0) throw new Error(`${name}: unknown ${unknown.join(', ')} (known: ${all.join(', ')})`)
    return names
  }
  const modes = list('--modes', GROWTH_MODES) as GrowthMode[]
  const caseNames = new Set(
    list(
      '--cases',
      CASES.map((c) => c.name),
    ),
  )
  const number = (name: string, fallback: string, min: number) => {
    const value = Number(option(name, fallback, args))
    if (!Number.isFinite(value) || value < min) throw new Error(`${name}: a number of at least ${min}`)
    return value
  }
  const expiredShare = number('--expired', '0.02', 0)
  if (expiredShare > 1) throw new Error('--expired: a share between 0 and 1')
  return {
    modes: GROWTH_MODES.filter((mode) => modes.includes(mode)),
    cases: CASES.filter((c) => c === BASELINE || caseNames.has(c.name)),
    rounds: Math.round(number('--rounds', quick ? '1' : '3', 1)),
    durationS: number('--duration', quick ? '0.5' : '3', 0.1),
    expiredShare,
    quick,
  }
}

/** One run's figures, per request. */
export interface GrowthSample {
  readonly rps: number
  readonly p99: number
  readonly cpuUs: number
  readonly storeCpuUs: number
}

/** A case's medians over its rounds, and each against the baseline's medians (the case ÷ the baseline). */
export interface GrowthRow {
  readonly median: GrowthSample
  readonly ratio: GrowthSample
}

/** The medians of `runs` and their ratios to the medians of `baseline` (NaN where the baseline's is 0). */
export function growthRow(runs: readonly GrowthSample[], baseline: readonly GrowthSample[]): GrowthRow {
  const medians = (samples: readonly GrowthSample[]): GrowthSample => ({
    rps: median(samples.map((s) => s.rps)),
    p99: median(samples.map((s) => s.p99)),
    cpuUs: median(samples.map((s) => s.cpuUs)),
    storeCpuUs: median(samples.map((s) => s.storeCpuUs)),
  })
  const mine = medians(runs)
  const base = medians(baseline)
  const over = (a: number, b: number) => (b === 0 ? Number.NaN : a / b)
  return {
    median: mine,
    ratio: {
      rps: over(mine.rps, base.rps),
      p99: over(mine.p99, base.p99),
      cpuUs: over(mine.cpuUs, base.cpuUs),
      storeCpuUs: over(mine.storeCpuUs, base.storeCpuUs),
    },
  }
}

/** `1.23×`, or `-` for a ratio that could not be taken. */
export const times = (ratio: number) => (Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : '-')

/** Bytes as `812 B`, `66.1 KiB` or `1.03 MiB`. */
export function bytes(n: number): string {
  if (!Number.isFinite(n)) return '-'
  if (n < 1024) return `${n.toFixed(0)} B`
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`
  return `${(n / 1024 / 1024).toFixed(2)} MiB`
}

/** A count as `1 M`, `10 M`, `250 k` or the number. */
export function count(n: number): string {
  if (n >= 1_000_000 && n % 1_000_000 === 0) return `${n / 1_000_000} M`
  if (n >= 1_000 && n % 1_000 === 0) return `${n / 1_000} k`
  return String(n)
}
