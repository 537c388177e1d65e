#!lua flags=allow-oom
--[[
  EXECUTING -> FAILED_RETRYABLE (kind 'retryable': the action did not take effect, a later
  claim may take over) or EXECUTING -> ABANDONED (kind 'unknown': the effect is unknown,
  automatic retries stop), for the caller's hold (docs/design.md §3 "Transitions", §4 outcomes). The
  record then lives for the failure retention: expiresAt = now + failureRetentionMs.

  KEYS[1]  the scope's record key
  ARGV[1..3]  owner, attempt, rev (lib/transition)
  ARGV[4]  kind: 'retryable' or 'unknown'
  ARGV[5]  failureRetentionMs: how long the failed record is kept
  ARGV[6]  the failure's cause, kept after the record's texts (record-layout.ts: where a
           completed record keeps its response); empty for none

  Replies: { 'OK', rev } applied, rev the new revision (ARGV[3] + 1); otherwise a refusal of
  lib/transition (ALREADY: in the kind's state at ARGV[3] + 1 for this owner and attempt;
  WRONG_STATE includes the other failure state). Flag allow-oom: lib/transition.

  Commands: TIME, GET, and SET ... PXAT when it writes; SPUBLISH (lib/notify) when a waiting
  claim marked the record (lib/record `waited`).
]]
--- @include "lib/held"

local owner, attempt, rev = hold_argv(6)
local kind = argv_choice(4, 'retryable', 'unknown')
local retention_ms = tonumber(ARGV[5])
if not owner or not kind or not argv_ms(retention_ms) then
  return argv_error('mark-failed.lua')
end

local target = kind == 'retryable' and 'FAILED_RETRYABLE' or 'ABANDONED'
local rec, refusal, key, now = hold(owner, attempt, rev, 'EXECUTING', target)
if refusal then
  return refusal
end
rec.expiresAt = now + retention_ms
return write_transition(key, rec, now, target, ARGV[6], target)
