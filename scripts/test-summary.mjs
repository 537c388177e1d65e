// Prints one plain closing line per vitest JSON report: "<name>: N passed, N failed".
import { existsSync, readFileSync } from 'node:fs'

let failed = 0
for (const file of process.argv.slice(2)) {
  if (!existsSync(file)) {
    console.log(`${file}: missing (the test run did not finish)`)
    failed++
    continue
  }
  const report = JSON.parse(readFileSync(file, 'utf8'))
  const name = file.replace(/^.*\//, '').replace(/\.json$/, '')
  console.log(`${name}: ${report.numPassedTests} passed, ${report.numFailedTests} failed`)
  failed += report.numFailedTests
}
process.exitCode = failed > 0 ? 1 : 0
