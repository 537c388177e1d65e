/**
 * What the docs tests read from README.md and every page under docs/: the fenced code blocks
 * with their info string and line, and the tables under a heading.
 */
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'

export const ROOT = join(import.meta.dirname, '..', '..')

/** README.md and every Markdown file under docs/, as paths relative to the repository. */
export function markdownFiles(): string[] {
  const docs = readdirSync(join(ROOT, 'docs'), { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.md'))
    .map((name) => relative(ROOT, join(ROOT, 'docs', name)))
    .sort()
  return ['README.md', ...docs]
}

export function readDoc(file: string): string {
  return readFileSync(join(ROOT, file), 'utf8')
}

export interface CodeBlock {
  /** The Markdown file, relative to the repository. */
  readonly file: string
  /** The line of the opening fence (1-based). */
  readonly line: number
  /** The info string's first word, e.g. `ts`. */
  readonly lang: string
  /** The info string's other words, e.g. `run`. */
  readonly flags: readonly string[]
  readonly code: string
}

/** Every fenced code block of a file (``` or ~~~ fences, unindented). */
export function codeBlocks(file: string): CodeBlock[] {
  const lines = readDoc(file).split('\n')
  const blocks: CodeBlock[] = []
  for (let i = 0; i < lines.length; i++) {
    const open = /^(```+|~~~+)\s*(\S*)\s*(.*)$/.exec(lines[i] ?? '')
    if (!open) continue
    const fence = open[1] ?? '```'
    const body: string[] = []
    let j = i + 1
    while (j < lines.length && !(lines[j] ?? '').startsWith(fence)) body.push(lines[j++] ?? '')
    blocks.push({
      file,
      line: i + 1,
      lang: (open[2] ?? '').toLowerCase(),
      flags: (open[3] ?? '').split(/\s+/).filter(Boolean),
      code: `${body.join('\n')}\n`,
    })
    i = j
  }
  return blocks
}

/** TypeScript blocks: info string `ts` or `typescript`. */
export function isTypeScript(block: CodeBlock): boolean {
  return block.lang === 'ts' || block.lang === 'typescript' || block.lang === 'tsx'
}

export interface TableRow {
  /** The cells by the header's column names (lowercase). */
  readonly cells: Readonly<Record<string, string>>
  readonly line: number
}

/**
 * The rows of every table between a heading whose text is `heading` (any level) and the next
 * heading, outside code blocks.
 */
export function tablesUnder(file: string, heading: string): TableRow[] {
  const lines = readDoc(file).split('\n')
  const rows: TableRow[] = []
  let inside = false
  let inCode = false
  let header: string[] | undefined
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? ''
    if (/^(```|~~~)/.test(line)) inCode = !inCode
    if (inCode) continue
    const title = /^#{1,6}\s+(.*?)\s*$/.exec(line)
    if (title) {
      inside = title[1] === heading
      header = undefined
      continue
    }
    if (!inside) continue
    if (!line.startsWith('|')) {
      header = undefined
      continue
    }
    const cells = splitRow(line)
    if (header === undefined) {
      header = cells.map((cell) => cell.toLowerCase())
      continue
    }
    if (cells.every((cell) => /^:?-+:?$/.test(cell))) continue
    rows.push({ cells: Object.fromEntries(header.map((name, k) => [name, cells[k] ?? ''])), line: i + 1 })
  }
  return rows
}

/** The cells of one table row; `\|` inside a cell is not a separator. */
function splitRow(line: string): string[] {
  const cells: string[] = []
  let cell = ''
  const inner = line.trim().replace(/^\|/, '').replace(/\|$/, '')
  for (let i = 0; i < inner.length; i++) {
    const char = inner[i]
    if (char === '\\' && inner[i + 1] === '|') {
      cell += '|'
      i++
    } else if (char === '|') {
      cells.push(cell.trim())
      cell = ''
    } else {
      cell += char
    }
  }
  cells.push(cell.trim())
  return cells
}

/** The headings of a file (text without the #s), outside code blocks. */
export function headings(file: string): { readonly text: string; readonly level: number; readonly line: number }[] {
  const out: { text: string; level: number; line: number }[] = []
  let inCode = false
  readDoc(file)
    .split('\n')
    .forEach((line, i) => {
      if (/^(```|~~~)/.test(line)) inCode = !inCode
      const title = !inCode && /^(#{1,6})\s+(.*?)\s*$/.exec(line)
      if (title) out.push({ text: title[2] ?? '', level: (title[1] ?? '').length, line: i + 1 })
    })
  return out
}
