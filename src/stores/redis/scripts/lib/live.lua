--[[
  The liveness rule shared by claim, inspect and every transition, with one server-clock
  reading (docs/design.md §3; docs/design.md §7 defect 5: inspect must not ignore the replay window that claim
  respects). The twin of `liveRecord` and `leaseLeftMs` in src/core/rules.ts.

  live_record(key, now) returns nil, expired when the scope is absent or expired at `now`
  (`expired` is true when an expired record is still stored):
  - `expiresAt <= now` (every state: the record's own lifetime, equal to the key's expiry, so
    a key Redis has not expired yet reads exactly as one it has), or
  - COMPLETED with `replayUntil <= now` (docs/design.md §3 claim step 3 replays only while now < replayUntil).
  Otherwise it returns the record with two more fields:
  - lease_live: true while `leaseUntil > now` (docs/design.md §3 steps 6-8: "leaseUntil <= now" ran out)
  - lease_left: milliseconds left on the lease, 0 once it ran out
]]
--- @include "lib/record"

local function live_record(key, now)
  local rec = read_record(key)
  if rec == nil then
    return nil, false
  end
  if rec.expiresAt <= now or (rec.state == 'COMPLETED' and rec.replayUntil <= now) then
    return nil, true
  end
  rec.lease_live = rec.leaseUntil > now
  rec.lease_left = rec.lease_live and (rec.leaseUntil - now) or 0
  return rec
end
