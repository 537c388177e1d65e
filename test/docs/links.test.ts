/**
 * README.md and docs/ cite only files the repository has: every relative link resolves to a
 * file (and its #anchor to a heading of that file), and every repository path in a code span
 * (`src/...`, `test/...`, ...) exists. The design lives in docs/design.md, so nothing cites a
 * design file outside the repository.
 */
import { existsSync } from 'node:fs'
import { dirname, join, normalize, relative } from 'node:path'
import { describe, expect, it } from 'vitest'
import { headings, markdownFiles, ROOT, readDoc } from './markdown.js'

/** GitHub's anchor of a heading: lowercase, punctuation dropped, spaces as hyphens. */
function anchorOf(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[`*_~]/g, (char) => (char === '_' ? '_' : ''))
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .trim()
    .replace(/\s/g, '-')
}

function anchors(file: string): Set<string> {
  const text = readDoc(file)
  const explicit = [...text.matchAll(/<a id="([^"]+)"/g)].map((match) => match[1] ?? '')
  return new Set([...headings(file).map((heading) => anchorOf(heading.text)), ...explicit])
}

/** Text outside fenced code blocks. */
function prose(file: string): string {
  return readDoc(file).replace(/^(```|~~~)[\s\S]*?^\1.*$/gm, '')
}

const FILES = markdownFiles()

describe.each(FILES)('%s', (file) => {
  it('links only to files and headings that exist', () => {
    const broken: string[] = []
    for (const match of prose(file).matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = match[1] ?? ''
      if (/^[a-z]+:/i.test(target)) continue
      const [path = '', anchor] = target.split('#')
      const resolved = path === '' ? file : relative(ROOT, normalize(join(ROOT, dirname(file), path)))
      if (!existsSync(join(ROOT, resolved))) {
        broken.push(target)
        continue
      }
      if (anchor !== undefined && resolved.endsWith('.md') && !anchors(resolved).has(anchor)) broken.push(target)
    }
    expect(broken).toEqual([])
  })

  it('names only repository paths that exist', () => {
    const paths = [...readDoc(file).matchAll(/`((?:src|plugins|test|examples|scripts|docs)\/[\w./-]+)`/g)]
      .map((match) => match[1] ?? '')
      .filter((path) => !path.includes('<'))
    expect(paths.filter((path) => !existsSync(join(ROOT, path)))).toEqual([])
  })

  it('cites no design or style file outside the repository', () => {
    expect(readDoc(file)).not.toMatch(/\bSPEC\b|\bSTYLE \d/)
  })
})
