--[[
  Claims a scope: SPEC §3 claim steps 1-8, in that order, in one atomic step, optionally
  starting it (CLAIMED -> EXECUTING) in the same script. The twin of `claimStep` in
  src/core/rules.ts.

  KEYS[1]  the scope's record key (<prefix>:idem:<layout>:d<v>:<opcode>:<digest>)

  ARGV[1]  owner: the invocation's token, 64 lowercase hex, the same for every re-send
  ARGV[2]  fingerprint of the request, stored with a new record and compared on every claim
  ARGV[3]  operation name, stored as `op`
  ARGV[4]  codec id, stored as `codec`
  ARGV[5]  policy revision, stored as `policy`
  ARGV[6]  start: '1' creates or takes over directly in EXECUTING, '0' in CLAIMED
  ARGV[7]  expiredExecution: 'recover' or 'takeover' (SPEC §3 step 7)
  ARGV[8]  leaseMs: the lease from now, positive integer
  ARGV[9]  failureRetentionMs: how long an unfinished record outlives its lease
  ARGV[10..n]  legacy fingerprints (older fingerprint versions of the same request), optional

  Replies (numbers are integer replies):
  { 'ACQUIRED', state, attempt, rev, leaseUntil }          step 1: absent or expired; attempt 1, rev 1
  { 'FINGERPRINT_MISMATCH' }                               step 2: no mutation, whatever the state
  { 'COMPLETED_REPLAY', record }                           step 3: the whole record (lib/record), response included
  { 'RECOVERY_REQUIRED', 'ABANDONED' }                     step 4
  { 'REPLAYED_ACQUIRE', state, attempt, rev, leaseUntil }  step 5: own CLAIMED or EXECUTING record, no mutation
  { 'TAKEN_OVER', state, attempt, rev, leaseUntil }        steps 6-7: new owner, attempt + 1, rev + 1
  { 'RECOVERY_REQUIRED', 'EXPIRED_EXECUTION' }             step 7 with expiredExecution 'recover'
  { 'IN_PROGRESS', retryAfterMs }                          step 8: ms left on the lease, at least 1
  state is 'CLAIMED' or 'EXECUTING'.
  Error replies: IDEMKIT_ARGS (malformed call, nothing done), IDEMKIT_CORRUPT (unreadable record,
  nothing written).

  Commands: TIME, GET, and SET ... PXAT when it writes. Lifetime (store.ts): a CLAIMED or
  EXECUTING record expires at leaseUntil + failureRetentionMs.
]]
--- @include "lib/args"
--- @include "lib/now"
--- @include "lib/live"

local key = KEYS[1]
argv_count(9, true)
local owner = argv_owner(1)
local fingerprint = argv_text(2, 'fingerprint')
local operation = argv_text(3, 'operation')
local codec = argv_text(4, 'codec')
local policy = argv_text(5, 'policy')
local start = argv_choice(6, 'start', '0', '1') == '1'
local expired_execution = argv_choice(7, 'expiredExecution', 'recover', 'takeover')
local lease_ms = argv_int(8, 'leaseMs')
local retention_ms = argv_int(9, 'failureRetentionMs')
for i = 10, #ARGV do
  argv_text(i, 'legacy fingerprint')
end
if argv_problem then
  return argv_error('claim.lua')
end

local now = now_ms()
local rec = live_record(key, now)
local new_state = start and 'EXECUTING' or 'CLAIMED'
local lease_until = now + lease_ms

-- A new hold: every field is what this claim brings; a takeover keeps the record's identity
-- (createdAt) and counts on from its attempt and rev.
local function hold(attempt, rev, created_at)
  write_record(key, {
    state = new_state, owner = owner, attempt = attempt, rev = rev,
    leaseUntil = lease_until, replayUntil = 0, expiresAt = lease_until + retention_ms,
    createdAt = created_at, fp = fingerprint, codec = codec, policy = policy, op = operation,
  }, now)
end

-- Step 1: absent or expired. SET replaces whatever was there, so nothing of an expired record
-- (a stored response, its attempt count) survives, and Redis can still refuse it (OOM) before
-- anything changed.
if rec == nil then
  hold(1, 1, now)
  return { 'ACQUIRED', new_state, 1, 1, lease_until }
end

-- Step 2: before any mutation, in every state. A legacy fingerprint counts as a match.
local matches = rec.fp == fingerprint
for i = 10, #ARGV do
  matches = matches or rec.fp == ARGV[i]
end
if not matches then
  return { 'FINGERPRINT_MISMATCH' }
end

-- Step 3: live_record already turned a COMPLETED record past replayUntil into step 1.
if rec.state == 'COMPLETED' then
  return { 'COMPLETED_REPLAY', record_bytes(key, rec) }
end

-- Step 4.
if rec.state == 'ABANDONED' then
  return { 'RECOVERY_REQUIRED', 'ABANDONED' }
end

-- Step 5: the caller's own earlier claim landed and its reply was lost. Only a record the
-- caller can still hold qualifies; its own FAILED_RETRYABLE record goes on to step 6 like
-- anyone else's.
if rec.owner == owner and (rec.state == 'CLAIMED' or rec.state == 'EXECUTING') then
  return { 'REPLAYED_ACQUIRE', rec.state, rec.attempt, rec.rev, rec.leaseUntil }
end

-- Steps 6 and 7.
local take_over = rec.state == 'FAILED_RETRYABLE'
  or (rec.state == 'CLAIMED' and not rec.lease_live)
  or (rec.state == 'EXECUTING' and not rec.lease_live and expired_execution == 'takeover')
if take_over then
  hold(rec.attempt + 1, rec.rev + 1, rec.createdAt)
  return { 'TAKEN_OVER', new_state, rec.attempt + 1, rec.rev + 1, lease_until }
end
if rec.state == 'EXECUTING' and not rec.lease_live then
  -- The effect may have happened: never run it again automatically.
  return { 'RECOVERY_REQUIRED', 'EXPIRED_EXECUTION' }
end

-- Step 8: a live lease (live_record: lease_left >= 1 while the lease is live).
return { 'IN_PROGRESS', rec.lease_left }
