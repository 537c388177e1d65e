--[[
  The compare-and-set on owner, attempt, state and rev with the ALREADY rule (docs/design.md §3
  "Transitions"), shared by start, complete, mark-failed and release (through lib/held);
  owner_check is shared with renew. The twins of `ownerCheck` and `transitionCheck` in
  src/core/rules.ts. The transitions' first arguments:

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
--- @include "lib/live"

-- nil, reply when the record is missing or held by someone else; rec, nil otherwise.
local function owner_check(key, now, owner, attempt)
  local rec = live_record(key, now)
  if rec == nil then
    return nil, { 'NOT_FOUND' }
  end
  if rec.owner ~= owner or rec.attempt ~= attempt then
    return nil, { 'NOT_OWNER' }
  end
  return rec, nil
end

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
