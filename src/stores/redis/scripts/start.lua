#!lua flags=allow-oom
--[[
  CLAIMED -> EXECUTING for the caller's hold (docs/design.md §3 "Transitions"): compare-and-set on owner,
  attempt, state and rev; sets a new lease and the unfinished-record lifetime.

  KEYS[1]  the scope's record key
  ARGV[1..3]  owner, attempt, rev (lib/transition)
  ARGV[4]  leaseMs: the new lease from now
  ARGV[5]  failureRetentionMs: the record expires at leaseUntil + failureRetentionMs

  Replies: { 'OK', rev } applied, rev the new revision (ARGV[3] + 1); otherwise a refusal of
  lib/transition (ALREADY: EXECUTING at ARGV[3] + 1 for this owner and attempt). Flag
  allow-oom: lib/transition.

  Commands: TIME, GET, and SET ... PXAT when it writes.
]]
--- @include "lib/held"

local owner, attempt, rev = hold_argv(5)
local lease_ms = tonumber(ARGV[4])
local retention_ms = tonumber(ARGV[5])
if not owner or not argv_ms(lease_ms) or not argv_ms(retention_ms) then
  return argv_error('start.lua')
end

local rec, refusal, key, now = hold(owner, attempt, rev, 'CLAIMED', 'EXECUTING')
if refusal then
  return refusal
end
rec.leaseUntil = now + lease_ms
rec.expiresAt = rec.leaseUntil + retention_ms
return write_transition(key, rec, now, 'EXECUTING')
