#!lua flags=allow-oom
--[[
  Deletes a CLAIMED record held by the caller (docs/design.md §3: release deletes only a CLAIMED record;
  an EXECUTING record is the evidence against a second run and is never deleted).
  Compare-and-set on owner, attempt, state and rev. There is no ALREADY: once deleted, a
  re-sent release finds nothing.

  KEYS[1]  the scope's record key
  ARGV[1..3]  owner, attempt, rev (lib/transition)

  Replies: { 'OK', 0 } deleted; otherwise NOT_FOUND, NOT_OWNER or WRONG_STATE (lib/transition).
  Flag allow-oom: lib/transition.

  Commands: TIME, GET, and DEL when it deletes; SPUBLISH (lib/notify) when a waiting claim marked
  the record (lib/record `waited`).
]]
--- @include "lib/held"

local owner, attempt, rev = hold_argv(3)
if not owner then
  return argv_error('release.lua')
end

local rec, refusal, key = hold(owner, attempt, rev, 'CLAIMED', nil)
if refusal then
  return refusal
end

redis.call('DEL', key)
if rec.waited then
  notify(key, 'released')
end
return { 'OK', 0 }
