--[[
  Read-only inspection of a scope, classified with the same helper and the same server clock
  as claim (SPEC §3 "Inspect"; SPEC §7 defect 5): a record past its replay window or its
  retention answers ABSENT, exactly as claim would then acquire. Writes nothing.

  KEYS[1]  the scope's record key

  ARGV[1]  owner: the inspecting invocation's token, 64 lowercase hex; decides `mine`

  Replies (numbers are integer replies; mine is 1 when the record's owner is ARGV[1], else 0):
  { 'ABSENT' }
  { 'CLAIMED', mine, attempt, rev, fp, op, leaseUntil, leaseRemainingMs }
  { 'EXECUTING', mine, attempt, rev, fp, op, leaseUntil, leaseRemainingMs }
  { 'COMPLETED', mine, attempt, rev, fp, op, resp, codec, policy, replayUntil }
  { 'FAILED_RETRYABLE', mine, attempt, rev, fp, op }
  { 'ABANDONED', mine, attempt, rev, fp, op }
  leaseRemainingMs is 0 once the lease has run out.
  Error replies: IDEMKIT_ARGS (malformed call), IDEMKIT_CORRUPT (unreadable record).
]]
--- @include "lib/args"
--- @include "lib/now"
--- @include "lib/classify"

local key = KEYS[1]
argv_count(1)
local owner = argv_owner(1)
if argv_problem then
  return argv_error('inspect.lua')
end

local now = now_ms()
local rec = classify(key, now)
if rec == nil then
  return { 'ABSENT' }
end

local mine = rec.owner == owner and 1 or 0
if rec.state == 'CLAIMED' then
  return { 'CLAIMED', mine, rec.attempt, rec.rev, rec.fp, rec.op, rec.leaseUntil, rec.lease_left }
end
if rec.state == 'EXECUTING' then
  return { 'EXECUTING', mine, rec.attempt, rec.rev, rec.fp, rec.op, rec.leaseUntil, rec.lease_left }
end
if rec.state == 'COMPLETED' then
  return {
    'COMPLETED', mine, rec.attempt, rec.rev, rec.fp, rec.op,
    read_response(key), rec.codec, rec.policy, rec.replayUntil,
  }
end
if rec.state == 'FAILED_RETRYABLE' then
  return { 'FAILED_RETRYABLE', mine, rec.attempt, rec.rev, rec.fp, rec.op }
end
-- ABANDONED: read_record admits no other state.
return { 'ABANDONED', mine, rec.attempt, rec.rev, rec.fp, rec.op }
