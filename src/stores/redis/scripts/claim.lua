--[[
  Claims a scope: docs/design.md §3 claim steps 1-8, in that order, in one atomic step, optionally
  starting it (CLAIMED -> EXECUTING) in the same script. One copy of the claim rule; the others,
  mapped in src/core/rules.ts's header: `claimStep` there (the memory store, the executor);
  `foundAnswer` and `runningAnswer` there, the Redis claim without a script
  (src/stores/redis/fast-claim.ts), which answers steps 2, 3 and 8 from the record
  `SET ... NX GET` hands back and sends every other claim here; the PL/pgSQL claim,
  `<table>_claim_v4` in src/stores/postgres/sql/functions/2-operations.sql (which the claims of
  earlier schema versions, `_claim_v2` and `_claim_v3`, call).

  KEYS[1]  the scope's record key (<prefix>:idem:<layout>:d<v>:<opcode>:<digest>)

  ARGV[1]  owner: the invocation's token, 64 lowercase hex, the same for every re-send
  ARGV[2]  fingerprint of the request, stored with a new record and compared on every claim
  ARGV[3]  start: '1' creates or takes over directly in EXECUTING, '0' in CLAIMED
  ARGV[4]  expiredExecution: 'recover', 'takeover' or 'resume' (docs/design.md §3 steps 4 and 7:
           'resume' takes over an ABANDONED record too)
  ARGV[5]  leaseMs: the lease from now, positive integer
  ARGV[6]  failureRetentionMs: how long an unfinished record outlives its lease
  ARGV[7]  codec id, policy revision and operation name, packed as the record keeps them
           (each a 16-bit length and its bytes): written with a new hold, never read here
  ARGV[8]  wait: '1' when the caller will wait for an execution in progress and watch the key
           (`inFlight: { waitMs }`): an IN_PROGRESS answer then marks the record for its waiters
           (lib/record `waited`), so the script that ends the execution notifies them; '0' otherwise
  ARGV[9..n]  legacy fingerprints (older fingerprint versions of the same request), optional

  Replies (numbers are integer replies):
  { 'ACQUIRED', state, attempt, rev, leaseUntil }          step 1: absent or expired; attempt 1, rev 1
  { 'FINGERPRINT_MISMATCH' }                               step 2: no mutation, whatever the state
  { 'COMPLETED_REPLAY', record }                           step 3: the whole record (lib/record), response included
  { 'RECOVERY_REQUIRED', 'ABANDONED' }                     step 4, unless expiredExecution is 'resume'
  { 'REPLAYED_ACQUIRE', state, attempt, rev, leaseUntil }  step 5: own CLAIMED or EXECUTING record, no mutation
  { 'TAKEN_OVER', state, attempt, rev, leaseUntil }        steps 6-7 (and 4 with 'resume'): new owner, attempt + 1, rev + 1
  { 'RECOVERY_REQUIRED', 'EXPIRED_EXECUTION' }             step 7 with expiredExecution 'recover'
  { 'IN_PROGRESS', retryAfterMs }                          step 8: ms left on the lease, at least 1
  state is 'CLAIMED' or 'EXECUTING'.
  Error replies: IDEMKIT_ARGS (malformed call, nothing done), IDEMKIT_CORRUPT (unreadable record,
  nothing written).

  Commands: TIME, GET, and SET ... PXAT when it writes; SETRANGE when it marks (step 8, wait
  '1', a record not marked yet). Lifetime (store.ts): a CLAIMED or EXECUTING record expires at
  leaseUntil + failureRetentionMs.
]]
--- @include "lib/args"
--- @include "lib/now"
--- @include "lib/live"

local key = KEYS[1]
local owner = ARGV[1]
local fingerprint = ARGV[2]
local start = argv_choice(3, '0', '1')
local expired_execution = argv_choice(4, 'recover', 'takeover', 'resume')
local lease_ms = tonumber(ARGV[5])
local retention_ms = tonumber(ARGV[6])
local wait = argv_choice(8, '0', '1')
if #KEYS ~= 1 or #ARGV < 8 or not wait or #owner ~= 64 or #fingerprint == 0 or not start or not expired_execution
  or not argv_ms(lease_ms) or not argv_ms(retention_ms) then
  return argv_error('claim.lua')
end

local now = now_ms()
local rec = live_record(key, now)
local new_state = start == '1' and 'EXECUTING' or 'CLAIMED'
local lease_until = now + lease_ms

-- Step 1: absent or expired. SET replaces whatever was there, so nothing of an expired record
-- (a stored response, its attempt count) survives, and Redis can still refuse it (OOM) before
-- anything changed. A takeover (below) keeps the record's identity (createdAt) and counts on
-- from its attempt and rev; both write what this claim brings.
if rec == nil then
  write_record(key, {
    state = new_state, owner = owner, attempt = 1, rev = 1,
    leaseUntil = lease_until, replayUntil = 0, expiresAt = lease_until + retention_ms, createdAt = now,
    texts = struct.pack('>H', #fingerprint) .. fingerprint .. ARGV[7],
  }, now)
  return { 'ACQUIRED', new_state, 1, 1, lease_until }
end

-- Step 2: before any mutation, in every state. A legacy fingerprint counts as a match.
local matches = rec.fp == fingerprint
for i = 9, #ARGV do
  matches = matches or rec.fp == ARGV[i]
end
if not matches then
  return { 'FINGERPRINT_MISMATCH' }
end

-- Step 3: live_record already turned a COMPLETED record past replayUntil into step 1.
if rec.state == 'COMPLETED' then
  return { 'COMPLETED_REPLAY', record_bytes(key, rec) }
end

-- Step 4; a resumed claim takes an ABANDONED record over (steps 6 and 7, below).
local resume = expired_execution == 'resume'
if rec.state == 'ABANDONED' and not resume then
  return { 'RECOVERY_REQUIRED', 'ABANDONED' }
end

-- Step 5: the caller's own earlier claim landed and its reply was lost. Only a record the
-- caller can still hold qualifies; its own FAILED_RETRYABLE record goes on to step 6 like
-- anyone else's.
if rec.owner == owner and (rec.state == 'CLAIMED' or rec.state == 'EXECUTING') then
  return { 'REPLAYED_ACQUIRE', rec.state, rec.attempt, rec.rev, rec.leaseUntil }
end

-- Steps 6 and 7 (and 4 when resumed). A takeover keeps the waiters' mark: requests that wait for the key wait for
-- the new execution as well (docs/waiting.md).
local take_over = rec.state == 'FAILED_RETRYABLE'
  or (rec.state == 'CLAIMED' and not rec.lease_live)
  or (rec.state == 'EXECUTING' and not rec.lease_live and (resume or expired_execution == 'takeover'))
  or rec.state == 'ABANDONED'
if take_over then
  write_record(key, {
    state = new_state, owner = owner, attempt = rec.attempt + 1, rev = rec.rev + 1,
    leaseUntil = lease_until, replayUntil = waited(rec) and 1 or 0, expiresAt = lease_until + retention_ms,
    createdAt = rec.createdAt,
    texts = struct.pack('>H', #fingerprint) .. fingerprint .. ARGV[7],
  }, now)
  return { 'TAKEN_OVER', new_state, rec.attempt + 1, rec.rev + 1, lease_until }
end
if rec.state == 'EXECUTING' and not rec.lease_live then
  -- The effect may have happened: never run it again automatically.
  return { 'RECOVERY_REQUIRED', 'EXPIRED_EXECUTION' }
end

-- Step 8: a live lease (live_record: lease_left >= 1 while the lease is live). A caller that
-- will wait marks the record first: the end of this execution then notifies it.
if wait == '1' then
  mark_waited(key, rec)
end
return { 'IN_PROGRESS', rec.lease_left }
