--[[
  Argument checks. Every call is checked before the TypeScript store sends it (the store front,
  src/core/store-front.ts: the same checks for every store), so a script repeats only the few
  comparisons that keep a record readable if a call bypasses the store: the argument count, an
  owner of 64 characters, a non-empty fingerprint, positive durations. A malformed call is
  answered with an error reply starting with IDEMKIT_ARGS, before anything is read or written.
]]

local function argv_error(script)
  return redis.error_reply('IDEMKIT_ARGS ' .. script .. ': malformed arguments (the store checks them before it sends a call)')
end

-- True when `n` (from tonumber) is a whole number from 1 to 15 digits: now + n stays exact in a
-- Lua number (a double) and prints as plain digits with %d.
local function argv_ms(n)
  return n ~= nil and n >= 1 and n <= 999999999999999 and n % 1 == 0
end

-- ARGV[i] when it is `a`, `b` or (when given) `c`, else nil.
local function argv_choice(i, a, b, c)
  local v = ARGV[i]
  if v == a or v == b or (c ~= nil and v == c) then
    return v
  end
  return nil
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
