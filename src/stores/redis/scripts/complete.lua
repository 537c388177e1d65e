#!lua flags=allow-oom
--[[
  EXECUTING -> COMPLETED for the caller's hold (docs/design.md §3 "Transitions"), storing the response;
  the record then replays, and lives, for the replay window: replayUntil = expiresAt =
  now + replayWindowMs.

  KEYS[1]  the scope's record key
  ARGV[1..3]  owner, attempt, rev (lib/transition)
  ARGV[4]  replayWindowMs: how long the record replays its response
  ARGV[5]  response: the codec-encoded response, bytes, stored after the record's header (may be empty)

  Replies: { 'OK', rev } applied, rev the new revision (ARGV[3] + 1); otherwise a refusal of
  lib/transition (ALREADY: COMPLETED at ARGV[3] + 1 for this owner and attempt). Flag
  allow-oom: lib/transition.

  Commands: TIME, GET, and SET ... PXAT when it writes; SPUBLISH (lib/notify) when a waiting
  claim marked the record (lib/record `waited`).
]]
--- @include "lib/held"

local owner, attempt, rev = hold_argv(5)
local replay_window_ms = tonumber(ARGV[4])
if not owner or not argv_ms(replay_window_ms) then
  return argv_error('complete.lua')
end

local rec, refusal, key, now = hold(owner, attempt, rev, 'EXECUTING', 'COMPLETED')
if refusal then
  return refusal
end
rec.replayUntil = now + replay_window_ms
rec.expiresAt = rec.replayUntil
return write_transition(key, rec, now, 'COMPLETED', ARGV[5], 'COMPLETED')
