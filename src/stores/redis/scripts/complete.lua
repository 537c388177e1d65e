#!lua flags=allow-oom
--[[
  EXECUTING -> COMPLETED for the caller's hold (docs/design.md §3 "Transitions"), storing the response;
  the record then replays, and lives, for the replay window: replayUntil = expiresAt =
  now + replayWindowMs.

  KEYS[1]  the scope's record key

  ARGV[1]  owner: 64 lowercase hex
  ARGV[2]  attempt the owner holds
  ARGV[3]  rev the owner last saw
  ARGV[4]  replayWindowMs: how long the record replays its response
  ARGV[5]  response: the codec-encoded response, bytes, stored after the record's header (may be empty)

  Replies:
  { 'OK', rev }              applied; rev is the new revision (ARGV[3] + 1)
  { 'ALREADY', rev }         already COMPLETED at ARGV[3] + 1 for this owner and attempt
  { 'NOT_FOUND' }            no live record
  { 'NOT_OWNER' }            another owner or attempt holds the record
  { 'WRONG_STATE', state }   same owner and attempt, another state or rev
  Error replies: IDEMKIT_ARGS (malformed call), IDEMKIT_CORRUPT (unreadable record).

  Flag allow-oom (the shebang, Redis 7): a transition of a record that exists lands even when
  Redis is at maxmemory, so once a claim was admitted its outcome is always recorded; only
  claim, which creates records, is refused (OOM) there. docs/design.md §3; docs/guarantees.md.

  Commands: TIME, GET, and SET ... PXAT when it writes; SPUBLISH (lib/notify).
]]
--- @include "lib/args"
--- @include "lib/now"
--- @include "lib/transition"
--- @include "lib/notify"

local key = KEYS[1]
local owner = ARGV[1]
local attempt = tonumber(ARGV[2])
local rev = tonumber(ARGV[3])
local replay_window_ms = tonumber(ARGV[4])
local response = ARGV[5]
if #KEYS ~= 1 or #ARGV ~= 5 or #owner ~= 64 or not argv_ms(attempt) or not argv_ms(rev)
  or not argv_ms(replay_window_ms) then
  return argv_error('complete.lua')
end

local now = now_ms()
local rec, refusal = transition(key, now, owner, attempt, rev, 'EXECUTING', 'COMPLETED')
if refusal then
  return refusal
end

rec.state = 'COMPLETED'
rec.rev = rec.rev + 1
rec.replayUntil = now + replay_window_ms
rec.expiresAt = rec.replayUntil
write_record(key, rec, now, response)
notify(key, 'COMPLETED')
return { 'OK', rec.rev }
