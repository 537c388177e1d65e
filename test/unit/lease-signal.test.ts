import { describe, expect, it } from 'vitest'
import { LeaseSignal } from '../../src/core/lease.js'

describe('LeaseSignal', () => {
  it('fires a signal read before the lease was lost', () => {
    const lease = new LeaseSignal()
    const signal = lease.signal
    const reasons: unknown[] = []
    signal.addEventListener('abort', () => reasons.push(signal.reason))

    lease.abort('taken over')
    lease.abort('again')

    expect(signal.aborted).toBe(true)
    expect(reasons).toEqual(['taken over'])
  })

  it('hands out an already aborted signal when it is read after the loss', () => {
    const lease = new LeaseSignal()

    lease.abort('lost')

    expect(lease.aborted).toBe(true)
    expect(lease.signal.aborted).toBe(true)
    expect(lease.signal.reason).toBe('lost')
  })

  it('stays live until the lease is lost', () => {
    expect(new LeaseSignal().signal.aborted).toBe(false)
  })
})
