--[[
  What a transition script does around the check of lib/transition: holds the record with one
  clock reading, and writes the transition (its first arguments, owner, attempt, rev, are read by
  lib/args `hold_argv`).
]]
--- @include "lib/args"
--- @include "lib/now"
--- @include "lib/record"
--- @include "lib/notify"
--- @include "lib/transition"

-- The transition from `from_state` to `to_state` of the record under KEYS[1], with one clock
-- reading: rec, nil, key, now when the caller holds it there, else nil and the refusal.
-- rec.waited: a waiting claim marked the record (lib/record `waited`), read before the caller
-- changes its times.
local function hold(owner, attempt, rev, from_state, to_state)
  local key, now = KEYS[1], now_ms()
  local rec, refusal = transition(key, now, owner, attempt, rev, from_state, to_state)
  if rec then
    rec.waited = waited(rec)
  end
  return rec, refusal, key, now
end

-- Writes a transition the caller applied to `rec` (its times set): `state` at rev + 1, with
-- `resp` when it completes, and tells the waiters when `ended` names how the execution ended
-- and a waiting claim marked the record.
local function write_transition(key, rec, now, state, resp, ended)
  rec.state = state
  rec.rev = rec.rev + 1
  write_record(key, rec, now, resp)
  if ended and rec.waited then
    notify(key, ended)
  end
  return { 'OK', rec.rev }
end
