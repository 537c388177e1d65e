import { describe, expect, it } from 'vitest'
import { ClaimDeadline } from '../../src/core/run/claim-deadline.js'
import { Schedule } from '../../src/core/schedule.js'
import { sleep } from '../helpers/executor-harness.js'

describe('ClaimDeadline', () => {
  it('calls onExpiry once after its time, and reads as expired', async () => {
    let expiries = 0
    const deadline = new ClaimDeadline(new Schedule(5), 30, () => expiries++)
    expect(deadline.expired).toBe(false)
    await sleep(80)
    expect(deadline.expired).toBe(true)
    expect(expiries).toBe(1)
  })

  it('never expires once stopped', async () => {
    let expiries = 0
    const deadline = new ClaimDeadline(new Schedule(5), 30, () => expiries++)
    deadline.stop()
    await sleep(80)
    expect(deadline.expired).toBe(false)
    expect(expiries).toBe(0)
  })

  it('does not count the time between stop and restart, and gives a whole deadline again', async () => {
    let expiries = 0
    const deadline = new ClaimDeadline(new Schedule(5), 60, () => expiries++)
    await sleep(40)
    deadline.stop()
    await sleep(80)
    deadline.restart()
    await sleep(30)
    expect(deadline.expired).toBe(false)
    await sleep(80)
    expect(deadline.expired).toBe(true)
    expect(expiries).toBe(1)
  })

  it('stays expired: a restart after the expiry does nothing', async () => {
    let expiries = 0
    const deadline = new ClaimDeadline(new Schedule(5), 20, () => expiries++)
    await sleep(60)
    deadline.restart()
    await sleep(60)
    expect(deadline.expired).toBe(true)
    expect(expiries).toBe(1)
  })
})
