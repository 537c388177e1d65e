#!lua flags=allow-oom
--[[
  Moves the lease of an EXECUTING record held by the caller to leaseMs from now, and its
  lifetime with it (docs/design.md §3: renew is its own script, really writes, never answers ALREADY;
  docs/design.md §7 defect 3). Checks owner, attempt and state; rev is neither compared nor changed.

  KEYS[1]  the scope's record key

  ARGV[1]  owner: 64 lowercase hex
  ARGV[2]  attempt the owner holds
  ARGV[3]  leaseMs: the new lease from now
  ARGV[4]  failureRetentionMs: the record expires at leaseUntil + failureRetentionMs

  Replies: { 'OK', leaseUntil } written, leaseUntil the new lease end (server epoch ms);
  otherwise NOT_FOUND, NOT_OWNER or WRONG_STATE (not EXECUTING), as lib/transition's
  owner_check decides; never ALREADY. Flag allow-oom: lib/transition.

  Commands: TIME, GET, and SET ... PXAT when it writes.
]]
--- @include "lib/args"
--- @include "lib/now"
--- @include "lib/record"
--- @include "lib/transition"

local key = KEYS[1]
local owner = ARGV[1]
local attempt = tonumber(ARGV[2])
local lease_ms = tonumber(ARGV[3])
local retention_ms = tonumber(ARGV[4])
if #KEYS ~= 1 or #ARGV ~= 4 or #owner ~= 64 or not argv_ms(attempt) or not argv_ms(lease_ms)
  or not argv_ms(retention_ms) then
  return argv_error('renew.lua')
end

local now = now_ms()
local rec, refusal = owner_check(key, now, owner, attempt)
if refusal then
  return refusal
end
if rec.state ~= 'EXECUTING' then
  return { 'WRONG_STATE', rec.state }
end

rec.leaseUntil = now + lease_ms
rec.expiresAt = rec.leaseUntil + retention_ms
write_record(key, rec, now)
return { 'OK', rec.leaseUntil }
