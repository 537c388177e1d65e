/**
 * Ends `npm run test:faults` with the figures every fault test recorded (see
 * test/helpers/figures.ts), one block per fault in issue order, with the test's result and the
 * suite's duration. Plain text, so it prints the same in CI. It also writes
 * `.test-results/faults.json` (or the file `FAULTS_RESULT` names) with the passed and failed
 * counts (the fields of vitest's JSON report that scripts/test-summary.mjs reads), so .ci/run
 * can close with one plain line.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import type { Reporter, TestModule } from 'vitest/node'
import type { Figures } from '../helpers/figures.js'

interface Block {
  readonly figures: Figures
  readonly test: string
  readonly state: string
}

function order(fault: string): number {
  const n = Number.parseInt(fault, 10)
  return Number.isNaN(n) ? 1_000 : n
}

export default class FaultSummaryReporter implements Reporter {
  private startedAt = Date.now()

  onInit(): void {
    this.startedAt = Date.now()
  }

  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const blocks: Block[] = []
    let passed = 0
    let failed = 0
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        const state = test.result().state
        if (state === 'passed') passed++
        if (state === 'failed') failed++
        for (const figures of test.meta().figures ?? []) blocks.push({ figures, test: test.name, state })
      }
    }
    blocks.sort((a, b) => order(a.figures.fault) - order(b.figures.fault))
    const seconds = Math.round((Date.now() - this.startedAt) / 1000)
    const lines = [
      '',
      '='.repeat(78),
      `Fault suite summary: ${passed} passed, ${failed} failed, ${seconds} s`,
      '='.repeat(78),
    ]
    for (const { figures, test, state } of blocks) {
      lines.push(`fault ${figures.fault}: ${figures.title} [${state === 'passed' ? 'pass' : state.toUpperCase()}]`)
      lines.push(`  test: ${test}`)
      const width = Math.max(...Object.keys(figures.values).map((name) => name.length))
      for (const [name, value] of Object.entries(figures.values)) lines.push(`  ${name.padEnd(width)}  ${value}`)
    }
    lines.push('='.repeat(78))
    mkdirSync('.test-results', { recursive: true })
    writeFileSync(
      process.env.FAULTS_RESULT ?? '.test-results/faults.json',
      JSON.stringify(
        { numPassedTests: passed, numFailedTests: failed, durationSeconds: seconds, figures: blocks },
        null,
        2,
      ),
    )
    process.stdout.write(`${lines.join('\n')}\n`)
  }
}
