--[[
  ARGV validation shared by every script. A malformed call is answered with a Redis error reply
  whose message starts with IDEMKIT_ARGS, before anything is read or written; the TypeScript
  store reports it as an invalid argument (it certainly was not applied).

  The argv_* helpers record the first problem in `argv_problem` and return a harmless
  placeholder, so a script validates every argument first and then answers with
  `if argv_problem then return argv_error(<script>) end`.
]]

local argv_problem = nil

-- Integers are at most 15 digits: far beyond any duration, and now + value stays exact in a
-- Lua number (a double) and prints as plain digits with %d.
local function argv_int(i, name)
  local v = ARGV[i]
  if v == nil or #v > 15 or not string.find(v, '^[1-9]%d*$') then
    argv_problem = argv_problem or ('ARGV[' .. i .. '] (' .. name .. ') must be a positive integer')
    return 1
  end
  return tonumber(v)
end

-- Owner tokens are 32 random bytes as 64 lowercase hex characters (SPEC §2 "Attempt").
local function argv_owner(i)
  local v = ARGV[i]
  if v == nil or #v ~= 64 or string.find(v, '[^0-9a-f]') then
    argv_problem = argv_problem or ('ARGV[' .. i .. '] (owner) must be 64 lowercase hex characters')
    return ''
  end
  return v
end

local function argv_text(i, name)
  local v = ARGV[i]
  if v == nil or #v == 0 then
    argv_problem = argv_problem or ('ARGV[' .. i .. '] (' .. name .. ') must be a non-empty string')
    return ''
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
