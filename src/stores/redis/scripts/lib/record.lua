--[[
  Reading and writing one record, the value of KEYS[1]: one string, packed with `struct`
  (record layout 2, the same bytes `src/stores/redis/record-layout.ts` reads and writes):

    B      layout version, 2
    c1     state: C CLAIMED, E EXECUTING, D COMPLETED, F FAILED_RETRYABLE, A ABANDONED
    d x7   attempt, rev, leaseUntil, replayUntil (0 unless COMPLETED), expiresAt, createdAt,
           updatedAt: numbers as doubles (integers up to 2^53 are exact), times in epoch ms
    c64    owner: the holder's token, 64 lowercase hex
    Hc0 x4 fp, codec, policy, op: each a 16-bit length and its bytes
    ...    resp: the rest of the string, the stored response (COMPLETED only)

  One GET reads it and one SET ... PXAT writes it, with the key's expiry at `expiresAt` (the
  record's own lifetime, store.ts "Record lifetime"), so a record Redis has not expired yet and
  one it already dropped both read as absent.

  Records written by version 1 of this library (layout 1: a hash of fields named as above,
  integers as decimal strings) are read too, until they expire: GET on them fails with
  WRONGTYPE, and the fields are read with HMGET instead. Every write is in layout 2.

  A value that does not hold a readable record raises an error reply starting with
  IDEMKIT_CORRUPT before anything is written; the TypeScript store reports a protocol error.
]]

local RECORD_FORMAT = '>Bc1dddddddc64Hc0Hc0Hc0Hc0'
local RECORD_VERSION = 2

-- State names and their one-letter codes. Comparisons, not tables: a script's top level runs on
-- every call, so a table here would be built again for every call.
local function state_of_code(code)
  if code == 'E' then return 'EXECUTING' end
  if code == 'D' then return 'COMPLETED' end
  if code == 'C' then return 'CLAIMED' end
  if code == 'F' then return 'FAILED_RETRYABLE' end
  if code == 'A' then return 'ABANDONED' end
  return nil
end

local function code_of_state(state)
  if state == 'EXECUTING' then return 'E' end
  if state == 'COMPLETED' then return 'D' end
  if state == 'CLAIMED' then return 'C' end
  if state == 'FAILED_RETRYABLE' then return 'F' end
  if state == 'ABANDONED' then return 'A' end
  return nil
end

local function record_corrupt(key, what)
  error(redis.error_reply('IDEMKIT_CORRUPT record ' .. key .. ' ' .. what))
end

local function legacy_int(key, name, v)
  if type(v) ~= 'string' or #v > 15 or not string.find(v, '^%d+$') then
    record_corrupt(key, 'has no integer ' .. name)
  end
  return tonumber(v)
end

local function legacy_text(key, name, v)
  if type(v) ~= 'string' then
    record_corrupt(key, 'has no ' .. name)
  end
  return v
end

local function read_legacy(key)
  -- Layout 1 (a hash): every field but `resp`, which is read only when it is returned.
  local LEGACY_FIELDS = {
    'state', 'owner', 'attempt', 'rev', 'op', 'fp', 'codec', 'policy',
    'leaseUntil', 'replayUntil', 'expiresAt', 'createdAt', 'updatedAt',
  }
  local v = redis.call('HMGET', key, unpack(LEGACY_FIELDS))
  if not v[1] or not code_of_state(v[1]) then
    record_corrupt(key, 'has no known state')
  end
  local rec = {
    state = v[1],
    owner = legacy_text(key, 'owner', v[2]),
    attempt = legacy_int(key, 'attempt', v[3]),
    rev = legacy_int(key, 'rev', v[4]),
    op = legacy_text(key, 'op', v[5]),
    fp = legacy_text(key, 'fp', v[6]),
    codec = legacy_text(key, 'codec', v[7]),
    policy = legacy_text(key, 'policy', v[8]),
    leaseUntil = legacy_int(key, 'leaseUntil', v[9]),
    replayUntil = 0,
    expiresAt = legacy_int(key, 'expiresAt', v[11]),
    createdAt = legacy_int(key, 'createdAt', v[12]),
    updatedAt = v[13] and legacy_int(key, 'updatedAt', v[13]) or 0,
    legacy = true,
  }
  if rec.state == 'COMPLETED' then
    rec.replayUntil = legacy_int(key, 'replayUntil', v[10])
  end
  return rec
end

-- Reads the record under `key`; nil when there is none. Does not judge expiry: that is
-- live_record's job, with the caller's clock reading.
local function read_record(key)
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then
    if raw.err and string.find(raw.err, 'WRONGTYPE', 1, true) and redis.call('TYPE', key).ok == 'hash' then
      return read_legacy(key)
    end
    record_corrupt(key, 'is not a string or a hash')
  end
  if not raw then
    return nil
  end
  local ok, version, code, attempt, rev, lease_until, replay_until, expires_at, created_at, updated_at,
    owner, fp, codec, policy, op, resp_at = pcall(struct.unpack, RECORD_FORMAT, raw)
  local state = ok and state_of_code(code)
  if not state or version ~= RECORD_VERSION then
    record_corrupt(key, 'is not in record layout ' .. RECORD_VERSION)
  end
  return {
    state = state, owner = owner, attempt = attempt, rev = rev,
    leaseUntil = lease_until, replayUntil = replay_until, expiresAt = expires_at,
    createdAt = created_at, updatedAt = updated_at,
    fp = fp, codec = codec, policy = policy, op = op,
    raw = raw, resp_at = resp_at,
  }
end

-- The record as layout-2 bytes, with `resp` after the header.
local function pack_record(rec, resp)
  return struct.pack(RECORD_FORMAT, RECORD_VERSION, code_of_state(rec.state),
    rec.attempt, rec.rev, rec.leaseUntil, rec.replayUntil, rec.expiresAt, rec.createdAt, rec.updatedAt,
    rec.owner, #rec.fp, rec.fp, #rec.codec, rec.codec, #rec.policy, rec.policy, #rec.op, rec.op) .. (resp or '')
end

-- The whole record as layout-2 bytes, response included: what claim and inspect hand back.
local function record_bytes(key, rec)
  if not rec.legacy then
    return rec.raw
  end
  local resp = ''
  if rec.state == 'COMPLETED' then
    resp = redis.call('HGET', key, 'resp')
    if type(resp) ~= 'string' then
      record_corrupt(key, 'is COMPLETED without a response')
    end
  end
  return pack_record(rec, resp)
end

-- The stored response of a layout-2 record: the bytes after its header.
local function record_response(rec)
  return string.sub(rec.raw, rec.resp_at)
end

-- Formats an integer for PXAT: plain digits, never 1e+15 (tostring in Lua 5.1 switches to
-- exponent notation past 14 significant digits).
local function int_str(n)
  return string.format('%d', n)
end

-- Every write goes through here: the record with `updatedAt` = now, and the key's expiry at
-- its `expiresAt`, in one SET (which also replaces a layout-1 hash).
local function write_record(key, rec, now, resp)
  rec.updatedAt = now
  redis.call('SET', key, pack_record(rec, resp), 'PXAT', int_str(rec.expiresAt))
end
