--[[
  Reading and writing one record: a hash under KEYS[1] whose field names are `RecordField` in
  src/core/record.ts. Integers are stored as decimal strings.

  A hash that does not hold a readable record (unknown state, a missing or non-numeric field)
  raises an error reply starting with IDEMKIT_CORRUPT before anything is written; the
  TypeScript store reports it as a protocol error.
]]

-- Every field but `resp`, which is read only when a response is returned (it can be large).
local RECORD_FIELDS = {
  'state', 'owner', 'attempt', 'rev', 'op', 'fp', 'codec', 'policy',
  'leaseUntil', 'replayUntil', 'expiresAt', 'createdAt',
}

local RECORD_STATES = {
  CLAIMED = true, EXECUTING = true, COMPLETED = true, FAILED_RETRYABLE = true, ABANDONED = true,
}

local function record_corrupt(key, what)
  error(redis.error_reply('IDEMKIT_CORRUPT record ' .. key .. ' ' .. what))
end

local function record_int(key, name, v)
  if type(v) ~= 'string' or #v > 15 or not string.find(v, '^%d+$') then
    record_corrupt(key, 'has no integer ' .. name)
  end
  return tonumber(v)
end

local function record_text(key, name, v)
  if type(v) ~= 'string' then
    record_corrupt(key, 'has no ' .. name)
  end
  return v
end

-- Formats an integer for the hash and for PEXPIREAT: plain digits, never 1e+15 (tostring in
-- Lua 5.1 switches to exponent notation past 14 significant digits).
local function int_str(n)
  return string.format('%d', n)
end

-- Reads the record under `key`; nil when there is no record. Does not judge expiry: that is
-- classify's job, with the caller's clock reading.
local function read_record(key)
  local v = redis.call('HMGET', key, unpack(RECORD_FIELDS))
  local state = v[1]
  if not state then
    -- HMGET answers all-nil for a missing key; a hash with fields but no state is not ours.
    for i = 2, #RECORD_FIELDS do
      if v[i] then record_corrupt(key, 'has no state') end
    end
    return nil
  end
  if not RECORD_STATES[state] then
    record_corrupt(key, 'has an unknown state')
  end
  local rec = {
    state = state,
    owner = record_text(key, 'owner', v[2]),
    attempt = record_int(key, 'attempt', v[3]),
    rev = record_int(key, 'rev', v[4]),
    op = record_text(key, 'op', v[5]),
    fp = record_text(key, 'fp', v[6]),
    codec = record_text(key, 'codec', v[7]),
    policy = record_text(key, 'policy', v[8]),
    leaseUntil = record_int(key, 'leaseUntil', v[9]),
    expiresAt = record_int(key, 'expiresAt', v[11]),
    createdAt = record_int(key, 'createdAt', v[12]),
  }
  if state == 'COMPLETED' then
    rec.replayUntil = record_int(key, 'replayUntil', v[10])
  end
  return rec
end

-- The stored response of a COMPLETED record.
local function read_response(key)
  local resp = redis.call('HGET', key, 'resp')
  if type(resp) ~= 'string' then
    record_corrupt(key, 'is COMPLETED without a response')
  end
  return resp
end

-- Every write goes through here: sets the given (name, value) pairs plus `updatedAt` and
-- `expiresAt`, then gives the key the same expiry instant (store.ts "Record lifetime"), so a
-- record Redis has not expired yet and one it has already dropped both read as absent.
local function write_record(key, now, expires_at, ...)
  local at = int_str(expires_at)
  redis.call('HSET', key, 'updatedAt', int_str(now), 'expiresAt', at, ...)
  redis.call('PEXPIREAT', key, at)
end
