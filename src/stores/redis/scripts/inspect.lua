#!lua flags=no-writes
--[[
  Read-only inspection of a scope, classified with the same helper and the same server clock
  as claim (docs/design.md §3 "Inspect"; docs/design.md §7 defect 5): a record past its replay window or its
  retention answers ABSENT, exactly as claim would then acquire. Writes nothing.

  KEYS[1]  the scope's record key

  ARGV[1]  owner: the inspecting invocation's token, 64 lowercase hex; decides `mine`

  Replies (numbers are integer replies; mine is 1 when the record's owner is ARGV[1], else 0):
  { 'ABSENT' }
  { state, mine, leaseRemainingMs, record }
  state is 'CLAIMED', 'EXECUTING', 'COMPLETED', 'FAILED_RETRYABLE' or 'ABANDONED'; record is
  the whole record (lib/record), response included; leaseRemainingMs is 0 once the lease has
  run out.
  Error replies: IDEMKIT_ARGS (malformed call), IDEMKIT_CORRUPT (unreadable record).

  Commands: TIME, GET.
]]
--- @include "lib/args"
--- @include "lib/now"
--- @include "lib/live"

local key = KEYS[1]
local owner = ARGV[1]
if #KEYS ~= 1 or #ARGV ~= 1 or #owner ~= 64 then
  return argv_error('inspect.lua')
end

local now = now_ms()
local rec = live_record(key, now)
if rec == nil then
  return { 'ABSENT' }
end
local state = rec.state
if state ~= 'CLAIMED' and state ~= 'EXECUTING' and state ~= 'COMPLETED' and state ~= 'FAILED_RETRYABLE' and state ~= 'ABANDONED' then
  record_corrupt(key, 'has an unknown state')
end
return { state, rec.owner == owner and 1 or 0, rec.lease_left, record_bytes(key, rec) }
