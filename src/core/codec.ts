/**
 * Response codecs: how an action's result is turned into the bytes a store keeps, and back.
 * The codec id is stored with the record and checked on replay (docs/design.md §4; §7 defect 6): a record
 * written by a codec this deployment cannot read is recovery-required, never a wrong body.
 */

/** Encodes results for storage and decodes them on replay. */
export interface Codec<T> {
  /** Stored with every record, e.g. `json-1`. Change it when the encoding changes. */
  readonly id: string
  /** Other codec ids whose records `decode` also reads (older revisions it still understands). */
  readonly reads?: readonly string[]
  /** @throws when the value cannot be stored; the executor then records an unknown effect. */
  encode(value: T): Buffer
  /**
   * @param data the bytes exactly as `encode` made them (a store may hand back a view into a
   *   larger buffer: copy what must outlive the call).
   * @param codecId the id stored with the record: `id` or one of `reads`.
   * @throws when the data is not this codec's; the executor answers recovery-required.
   */
  decode(data: Buffer, codecId: string): T
}

/** True when `codec` can decode a record written by the codec `storedId`. */
export function canRead(codec: Codec<unknown>, storedId: string): boolean {
  return codec.id === storedId || (codec.reads?.includes(storedId) ?? false)
}

/**
 * A codec for JSON-serialisable results: `JSON.stringify` / `JSON.parse`, as UTF-8. `undefined`
 * (a function that returns nothing) is stored as no bytes, which no JSON text is, and read back
 * as `undefined`.
 */
export function jsonCodec<T>(id = 'json-1'): Codec<T> {
  return {
    id,
    encode(value) {
      if (value === undefined) return EMPTY
      const text = JSON.stringify(value)
      if (text === undefined) throw new TypeError('The result is not JSON-serialisable.')
      return Buffer.from(text, 'utf8')
    },
    decode(data) {
      return (data.byteLength === 0 ? undefined : JSON.parse(data.toString('utf8'))) as T
    },
  }
}

const EMPTY = Buffer.alloc(0)
