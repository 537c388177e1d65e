--[[
  The owner rule every transition and renew starts with (docs/design.md §3 "Transitions"), the twin
  of `ownerCheck` in src/core/rules.ts: owner_check(key, now, owner, attempt) returns rec, nil
  when the record is live and held by (owner, attempt), else nil and { 'NOT_FOUND' } (no live
  record, as live_record decides) or { 'NOT_OWNER' } (another owner or attempt holds it).
]]
--- @include "lib/live"

-- nil, reply when the record is missing or held by someone else; rec, nil otherwise.
local function owner_check(key, now, owner, attempt)
  local rec = live_record(key, now)
  if rec == nil then
    return nil, { 'NOT_FOUND' }
  end
  if rec.owner ~= owner or rec.attempt ~= attempt then
    return nil, { 'NOT_OWNER' }
  end
  return rec, nil
end
