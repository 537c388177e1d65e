#!lua flags=allow-oom
--[[
  EXECUTING -> FAILED_RETRYABLE (kind 'retryable': the action did not take effect, a later
  claim may take over) or EXECUTING -> ABANDONED (kind 'unknown': the effect is unknown,
  automatic retries stop), for the caller's hold (docs/design.md §3 "Transitions", §4 outcomes). The
  record then lives for the failure retention: expiresAt = now + failureRetentionMs.

  KEYS[1]  the scope's record key

  ARGV[1]  owner: 64 lowercase hex
  ARGV[2]  attempt the owner holds
  ARGV[3]  rev the owner last saw
  ARGV[4]  kind: 'retryable' or 'unknown'
  ARGV[5]  failureRetentionMs: how long the failed record is kept

  Replies:
  { 'OK', rev }              applied; rev is the new revision (ARGV[3] + 1)
  { 'ALREADY', rev }         already in the kind's state at ARGV[3] + 1 for this owner and attempt
  { 'NOT_FOUND' }            no live record
  { 'NOT_OWNER' }            another owner or attempt holds the record
  { 'WRONG_STATE', state }   same owner and attempt, another state or rev (including the other
                             failure state)
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
local kind = argv_choice(4, 'retryable', 'unknown')
local retention_ms = tonumber(ARGV[5])
if #KEYS ~= 1 or #ARGV ~= 5 or #owner ~= 64 or not argv_ms(attempt) or not argv_ms(rev) or not kind
  or not argv_ms(retention_ms) then
  return argv_error('mark-failed.lua')
end

local target = kind == 'retryable' and 'FAILED_RETRYABLE' or 'ABANDONED'
local now = now_ms()
local rec, refusal = transition(key, now, owner, attempt, rev, 'EXECUTING', target)
if refusal then
  return refusal
end

rec.state = target
rec.rev = rec.rev + 1
rec.expiresAt = now + retention_ms
write_record(key, rec, now)
notify(key, target)
return { 'OK', rec.rev }
