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

  Commands: GET, TIME, and SET ... PXAT when it writes (PEXPIRETIME before it for a record in
  layout 3); SPUBLISH (lib/notify) when a waiting claim marked the record (lib/record `waited`).
  A call the lean path (below) leaves to the full path reads GET and TIME once more there.

  The lean path (docs/design.md §6 "A lean completion"): the completion the store sends is
  almost always one the record allows, so it is first tried on the record's bytes. The bytes
  that fence it are compared where lib/record's layout puts them, without decoding the record:
  layout 2 or 3, state E, attempt and rev (as the doubles ARGV[2..3] pack to), owner, the texts
  within the string, and the record live at `now`. The COMPLETED record is then spliced from
  them: state D, rev + 1, replayUntil = expiresAt = now + replayWindowMs, updatedAt = now, the
  other bytes (attempt, leaseUntil, createdAt, owner, texts) carried, layout 3's times made
  absolute as lib/record reads them, the response after the texts: the bytes write_record would
  write. Anything else (no record, a layout-1 hash, another owner, attempt, state or rev, a
  record run out, bytes that do not read as a record) goes to the full path below, which
  answers it exactly as before, refusal or error.
]]
-- The lean path needs only these; the full path's helpers are defined below it, so a completion
-- the lean path writes does not pay for defining them.
--- @include "lib/args"
--- @include "lib/now"
--- @include "lib/notify"

local owner, attempt, rev = hold_argv(5)
local replay_window_ms = tonumber(ARGV[4])
if not owner or not argv_ms(replay_window_ms) then
  return argv_error('complete.lua')
end

-- The lean path (above). 1-based offsets of lib/record's header: state 2, attempt 3..10,
-- rev 11..18, leaseUntil 19..26, the waiters' mark 27..34, expiresAt 35..42, createdAt 43..50,
-- updatedAt 51..58, owner 59..122, the texts' length 123..124, the texts from 125 on (TEXTS_AT).
local function complete_lean(key, resp)
  local raw = redis.pcall('GET', key)
  if type(raw) ~= 'string' or #raw < 126 then
    return nil
  end
  local version = string.byte(raw, 1)
  if (version ~= 2 and version ~= 3) or string.sub(raw, 2, 2) ~= 'E'
    or string.sub(raw, 3, 18) ~= struct.pack('>dd', attempt, rev) or string.sub(raw, 59, 122) ~= owner then
    return nil
  end
  -- The last byte of the texts (read_record's check: they end within the string).
  local texts_end = 124 + struct.unpack('>H', raw, 123)
  if texts_end > #raw then
    return nil
  end
  local mark, expires_at = struct.unpack('>dd', raw, 27)
  local now = now_ms()
  local until_at = now + replay_window_ms
  -- rev .. updatedAt, as write_record writes them.
  local numbers
  if version == 3 then
    local expiry = redis.call('PEXPIRETIME', key)
    if expiry <= 0 then
      return nil
    end
    local lease_until = struct.unpack('>d', raw, 19)
    local created_at = struct.unpack('>d', raw, 43)
    -- The key expires one millisecond before the record (lib/record read_record).
    local base = expiry + 1 - expires_at
    expires_at = expiry + 1
    numbers = struct.pack('>dddddd', rev + 1, base + lease_until, until_at, until_at, base + created_at, now)
  else
    numbers = struct.pack('>d', rev + 1) .. string.sub(raw, 19, 26) .. struct.pack('>dd', until_at, until_at)
      .. string.sub(raw, 43, 50) .. struct.pack('>d', now)
  end
  if expires_at <= now then
    return nil
  end
  redis.call('SET', key, string.char(2) .. 'D' .. string.sub(raw, 3, 10) .. numbers .. string.sub(raw, 59, texts_end) .. resp,
    'PXAT', string.format('%d', until_at - 1))
  if mark ~= 0 then
    notify(key, 'COMPLETED')
  end
  return { 'OK', rev + 1 }
end

local done = complete_lean(KEYS[1], ARGV[5])
if done then
  return done
end

-- The full path: the transition check every transition shares.
--- @include "lib/held"

local rec, refusal, key, now = hold(owner, attempt, rev, 'EXECUTING', 'COMPLETED')
if refusal then
  return refusal
end
rec.replayUntil = now + replay_window_ms
rec.expiresAt = rec.replayUntil
return write_transition(key, rec, now, 'COMPLETED', ARGV[5], 'COMPLETED')
