--[[
  What the transition scripts share (start, complete, mark-failed, release; renew shares
  owner_check, lib/owner): their first arguments, the compare-and-set on owner, attempt, state and rev
  with the ALREADY rule (docs/design.md §3 "Transitions"), and the write. The twins of
  `ownerCheck` and `transitionCheck` in src/core/rules.ts.

  ARGV[1]  owner: 64 lowercase hex
  ARGV[2]  attempt the owner holds
  ARGV[3]  rev the owner last saw (renew sends no rev: its ARGV[3] is its own)

  Replies of every transition but its own OK:
  { 'ALREADY', rev }         the effect is there already: same owner and attempt, state is the
                             target, rev is exactly ARGV[3] + 1 (a re-sent transition whose reply
                             was lost); release, with no target, never answers it
  { 'NOT_FOUND' }            no live record (absent or expired, as live_record decides)
  { 'NOT_OWNER' }            another owner or another attempt holds it (taken over)
  { 'WRONG_STATE', state }   same owner and attempt, any other state or rev
  Error replies: IDEMKIT_ARGS (malformed call), IDEMKIT_CORRUPT (unreadable record).

  Flag allow-oom (each script's shebang, Redis 7): a transition of a record that exists lands
  even when Redis is at maxmemory, so once a claim was admitted its outcome is always recorded;
  only claim, which creates records, is refused (OOM) there. docs/design.md §3; docs/guarantees.md.

  transition(key, now, owner, attempt, rev, from_state, to_state) returns rec, nil when the
  record is live, held by (owner, attempt), in `from_state` at `rev` (the caller applies the
  transition), else nil and the refusal above.
]]
--- @include "lib/args"
--- @include "lib/now"
--- @include "lib/record"
--- @include "lib/notify"
--- @include "lib/owner"

local function transition(key, now, owner, attempt, rev, from_state, to_state)
  local rec, refusal = owner_check(key, now, owner, attempt)
  if refusal then
    return nil, refusal
  end
  if to_state ~= nil and rec.state == to_state and rec.rev == rev + 1 then
    return nil, { 'ALREADY', rec.rev }
  end
  if rec.state ~= from_state or rec.rev ~= rev then
    return nil, { 'WRONG_STATE', rec.state }
  end
  return rec, nil
end

-- The caller's hold from ARGV[1..3] of a call of `count` arguments: owner, attempt, rev, or nil
-- when the call is malformed.
local function hold_argv(count)
  local owner, attempt, rev = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
  if #KEYS ~= 1 or #ARGV ~= count or #owner ~= 64 or not argv_ms(attempt) or not argv_ms(rev) then
    return nil
  end
  return owner, attempt, rev
end

-- The transition from `from_state` to `to_state` of the record under KEYS[1], with one clock
-- reading: rec, nil, key, now when the caller holds it there, else nil and the refusal.
local function hold(owner, attempt, rev, from_state, to_state)
  local key, now = KEYS[1], now_ms()
  local rec, refusal = transition(key, now, owner, attempt, rev, from_state, to_state)
  return rec, refusal, key, now
end

-- Writes a transition the caller applied to `rec` (its times set): `state` at rev + 1, with
-- `resp` when it completes, and tells the waiters when `ended` names how the execution ended.
local function write_transition(key, rec, now, state, resp, ended)
  rec.state = state
  rec.rev = rec.rev + 1
  write_record(key, rec, now, resp)
  if ended then
    notify(key, ended)
  end
  return { 'OK', rec.rev }
end
