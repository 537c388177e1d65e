#!lua flags=allow-oom
--[[
  CLAIMED -> EXECUTING for the caller's hold (docs/design.md §3 "Transitions"): compare-and-set on owner,
  attempt, state and rev; sets a new lease and the unfinished-record lifetime.

  KEYS[1]  the scope's record key

  ARGV[1]  owner: 64 lowercase hex
  ARGV[2]  attempt the owner holds
  ARGV[3]  rev the owner last saw
  ARGV[4]  leaseMs: the new lease from now
  ARGV[5]  failureRetentionMs: the record expires at leaseUntil + failureRetentionMs

  Replies:
  { 'OK', rev }              applied; rev is the new revision (ARGV[3] + 1)
  { 'ALREADY', rev }         already EXECUTING at ARGV[3] + 1 for this owner and attempt
  { 'NOT_FOUND' }            no live record
  { 'NOT_OWNER' }            another owner or attempt holds the record
  { 'WRONG_STATE', state }   same owner and attempt, another state or rev
  Error replies: IDEMKIT_ARGS (malformed call), IDEMKIT_CORRUPT (unreadable record).

  Flag allow-oom (the shebang, Redis 7): a transition of a record that exists lands even when
  Redis is at maxmemory, so once a claim was admitted its outcome is always recorded; only
  claim, which creates records, is refused (OOM) there. docs/design.md §3; docs/guarantees.md.

  Commands: TIME, GET, and SET ... PXAT when it writes.
]]
--- @include "lib/args"
--- @include "lib/now"
--- @include "lib/transition"

local key = KEYS[1]
local owner = ARGV[1]
local attempt = tonumber(ARGV[2])
local rev = tonumber(ARGV[3])
local lease_ms = tonumber(ARGV[4])
local retention_ms = tonumber(ARGV[5])
if #KEYS ~= 1 or #ARGV ~= 5 or #owner ~= 64 or not argv_ms(attempt) or not argv_ms(rev)
  or not argv_ms(lease_ms) or not argv_ms(retention_ms) then
  return argv_error('start.lua')
end

local now = now_ms()
local rec, refusal = transition(key, now, owner, attempt, rev, 'CLAIMED', 'EXECUTING')
if refusal then
  return refusal
end

rec.state = 'EXECUTING'
rec.rev = rec.rev + 1
rec.leaseUntil = now + lease_ms
rec.expiresAt = rec.leaseUntil + retention_ms
write_record(key, rec, now)
return { 'OK', rec.rev }
