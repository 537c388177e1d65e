#!lua flags=allow-oom
--[[
  Deletes a CLAIMED record held by the caller (docs/design.md §3: release deletes only a CLAIMED record;
  an EXECUTING record is the evidence against a second run and is never deleted).
  Compare-and-set on owner, attempt, state and rev. There is no ALREADY: once deleted, a
  re-sent release finds nothing.

  KEYS[1]  the scope's record key

  ARGV[1]  owner: 64 lowercase hex
  ARGV[2]  attempt the owner holds
  ARGV[3]  rev the owner last saw

  Replies:
  { 'OK', 0 }                deleted
  { 'NOT_FOUND' }            no live record
  { 'NOT_OWNER' }            another owner or attempt holds the record
  { 'WRONG_STATE', state }   same owner and attempt, another state or rev
  Error replies: IDEMKIT_ARGS (malformed call), IDEMKIT_CORRUPT (unreadable record).

  Flag allow-oom (the shebang, Redis 7): a transition of a record that exists lands even when
  Redis is at maxmemory, so once a claim was admitted its outcome is always recorded; only
  claim, which creates records, is refused (OOM) there. docs/design.md §3; docs/guarantees.md.

  Commands: TIME, GET, and DEL when it deletes; SPUBLISH (lib/notify).
]]
--- @include "lib/args"
--- @include "lib/now"
--- @include "lib/transition"
--- @include "lib/notify"

local key = KEYS[1]
local owner = ARGV[1]
local attempt = tonumber(ARGV[2])
local rev = tonumber(ARGV[3])
if #KEYS ~= 1 or #ARGV ~= 3 or #owner ~= 64 or not argv_ms(attempt) or not argv_ms(rev) then
  return argv_error('release.lua')
end

local now = now_ms()
local _, refusal = transition(key, now, owner, attempt, rev, 'CLAIMED', nil)
if refusal then
  return refusal
end

redis.call('DEL', key)
notify(key, 'released')
return { 'OK', 0 }
