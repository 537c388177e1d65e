/**
 * SHA-256 and HMAC-SHA256 for the per-request path. Node's one-shot `crypto.hash()` (Node
 * 20.12+) hashes without creating a Hash object, several times faster than `createHash()` for
 * inputs of a few hundred bytes; HMAC is then the RFC 2104 construction over two one-shot
 * hashes, with the key's inner and outer pad blocks computed once per key. Where
 * `crypto.hash()` is missing, both fall back to `createHash()` / `createHmac()`: same results.
 */
import * as crypto from 'node:crypto'

/** Node's `crypto.hash()`; `null` where this Node has none (and in tests of the fallback). */
export type OneShotHash = (
  algorithm: string,
  data: Uint8Array,
  outputEncoding: 'hex' | 'latin1' | 'buffer',
) => string | Buffer
const nodeOneShot: OneShotHash | null = (crypto as unknown as { hash?: OneShotHash }).hash ?? null

/** SHA-256's block size in bytes: the length of the HMAC pad blocks. */
const BLOCK_BYTES = 64

/** SHA-256 of `data`, as 64 lowercase hex characters. */
export function sha256Hex(data: Uint8Array, oneShot: OneShotHash | null = nodeOneShot): string {
  if (oneShot !== null) return oneShot('sha256', data, 'hex') as string
  return crypto.createHash('sha256').update(data).digest('hex')
}

/** An HMAC-SHA256 key prepared once: its pad blocks, so each MAC is two one-shot hashes. */
export class HmacSha256 {
  readonly #key: crypto.KeyObject
  readonly #inner: Buffer
  readonly #outer: Buffer
  readonly #outerBlock: Buffer
  readonly #oneShot: OneShotHash | null

  constructor(secret: Uint8Array, oneShot: OneShotHash | null = nodeOneShot) {
    this.#oneShot = oneShot
    this.#key = crypto.createSecretKey(Buffer.from(secret))
    // RFC 2104: a key longer than the block is hashed first; then it is padded with zeros.
    const key = secret.byteLength > BLOCK_BYTES ? crypto.createHash('sha256').update(secret).digest() : secret
    this.#inner = Buffer.alloc(BLOCK_BYTES, 0x36)
    this.#outer = Buffer.alloc(BLOCK_BYTES, 0x5c)
    for (let i = 0; i < key.byteLength; i++) {
      this.#inner[i] = (this.#inner[i] as number) ^ (key[i] as number)
      this.#outer[i] = (this.#outer[i] as number) ^ (key[i] as number)
    }
    // The outer pad followed by room for the inner hash, reused by every MAC of this key (the
    // calls are synchronous, so one block serves them all).
    this.#outerBlock = Buffer.alloc(BLOCK_BYTES + 32)
    this.#outer.copy(this.#outerBlock, 0)
  }

  /**
   * The MAC of a message whose first 64 bytes are left free for the inner pad: write the
   * message at offset `HMAC_HEADROOM` of `buffer` (see `encodeFields`), so it is not copied.
   * @returns 64 lowercase hex characters.
   */
  macWithHeadroom(buffer: Buffer): string {
    const oneShot = this.#oneShot
    if (oneShot === null) {
      return crypto.createHmac('sha256', this.#key).update(buffer.subarray(HMAC_HEADROOM)).digest('hex')
    }
    this.#inner.copy(buffer, 0)
    // The inner hash as latin-1 text, written into the outer block: the one-shot hash's
    // 'buffer' output costs several times its 'latin1' output (Node 20).
    const innerHash = oneShot('sha256', buffer, 'latin1') as string
    const outer = this.#outerBlock
    outer.write(innerHash, BLOCK_BYTES, 'latin1')
    return oneShot('sha256', outer, 'hex') as string
  }
}

/** Bytes to leave free in front of a message given to `HmacSha256.macWithHeadroom`. */
export const HMAC_HEADROOM = BLOCK_BYTES
