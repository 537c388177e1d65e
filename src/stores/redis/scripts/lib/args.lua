--[[
  ARGV checks shared by every script. The TypeScript store checks every argument before it
  sends a call (src/core/store-args.ts, the same checks for every store); the scripts repeat
  only what keeps a record readable if a call bypasses it: the argument count, numbers that are
  positive integers of at most 15 digits, an owner of 64 characters, non-empty texts, known
  choices. A malformed call is answered with an error reply starting with IDEMKIT_ARGS, before
  anything is read or written.

  The argv_* helpers record the first problem in `argv_problem` and return a harmless
  placeholder, so a script checks every argument first and then answers with
  `if argv_problem then return argv_error(<script>) end`.
]]

local argv_problem = nil

-- At most 15 digits: now + value stays exact in a Lua number (a double) and prints as plain
-- digits with %d.
local function argv_int(i, name)
  local n = tonumber(ARGV[i])
  if not n or n < 1 or n > 999999999999999 or n % 1 ~= 0 then
    argv_problem = argv_problem or ('ARGV[' .. i .. '] (' .. name .. ') must be a positive integer')
    return 1
  end
  return n
end

-- Owner tokens are 32 random bytes as 64 lowercase hex characters (SPEC §2 "Attempt"); the
-- record keeps exactly 64 bytes for it.
local function argv_owner(i)
  local v = ARGV[i]
  if v == nil or #v ~= 64 then
    argv_problem = argv_problem or ('ARGV[' .. i .. '] (owner) must be 64 lowercase hex characters')
    return string.rep('0', 64)
  end
  return v
end

local function argv_text(i, name)
  local v = ARGV[i]
  if v == nil or #v == 0 or #v > 65535 then
    argv_problem = argv_problem or ('ARGV[' .. i .. '] (' .. name .. ') must be a non-empty string')
    return '-'
  end
  return v
end

-- `a` and `b` are the only accepted values; returns the value given.
local function argv_choice(i, name, a, b)
  local v = ARGV[i]
  if v ~= a and v ~= b then
    argv_problem = argv_problem or ('ARGV[' .. i .. '] (' .. name .. ') must be ' .. a .. ' or ' .. b)
    return a
  end
  return v
end

-- Exactly `n` arguments, or at least `n` when `more` is true; and exactly one key (SPEC §2:
-- one scope, one key, so Redis Cluster works unchanged).
local function argv_count(n, more)
  if #ARGV < n or (not more and #ARGV > n) then
    argv_problem = argv_problem or ('expected ' .. (more and 'at least ' or '') .. n .. ' arguments, got ' .. #ARGV)
  end
  if #KEYS ~= 1 then
    argv_problem = argv_problem or ('expected exactly one key, got ' .. #KEYS)
  end
end

local function argv_error(script)
  return redis.error_reply('IDEMKIT_ARGS ' .. script .. ': ' .. argv_problem)
end
