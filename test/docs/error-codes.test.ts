/**
 * docs/errors.md has one entry per problem code (src/http/problem.ts) and per `ERR_IDEM_*` code
 * (src/core/errors.ts), and no entry for a code that does not exist. A problem entry states the
 * status and `type` the code answers with; every entry says what the client and the operator do.
 */
import { describe, expect, it } from 'vitest'
import { ErrorCode } from '../../src/core/errors.js'
import { ProblemCode, problemRetryable, problemStatus, problemType } from '../../src/http/problem.js'
import { headings, readDoc } from './markdown.js'

const PAGE = 'docs/errors.md'

/** The text of each `### CODE` section, by code. */
function entries(): Map<string, string> {
  const lines = readDoc(PAGE).split('\n')
  const found = new Map<string, string>()
  const titles = headings(PAGE)
  titles.forEach((title, i) => {
    if (title.level !== 3 || !/^(IDEMPOTENCY|ERR_IDEM)_[A-Z_]+$/.test(title.text)) return
    const end = titles[i + 1]?.line ?? lines.length + 1
    found.set(title.text, lines.slice(title.line, end - 1).join('\n'))
  })
  return found
}

describe('the error codes page', () => {
  const documented = entries()
  const problems = Object.values(ProblemCode)
  const errors = Object.values(ErrorCode)

  it('has an entry for every code and none for a code that does not exist', () => {
    expect([...documented.keys()].sort()).toEqual([...problems, ...errors].sort())
  })

  it.each(problems)('gives the status and type of %s', (code) => {
    const text = documented.get(code) ?? ''
    expect(text).toContain(`${problemStatus(code)}, \`${problemType(code)}\``)
  })

  it.each(problems)('says whether a retry of %s can help, as the answer does', (code) => {
    const text = documented.get(code) ?? ''
    expect(text).toContain(`\`${problemType(code)}\`, \`retryable: ${problemRetryable(code)}\``)
  })

  it.each([...problems, ...errors])('says what the client and the operator do for %s', (code) => {
    const text = documented.get(code) ?? ''
    expect(text).toMatch(/\*\*Client:\*\* \S/)
    expect(text).toMatch(/\*\*Operator:\*\* \S/)
  })
})
