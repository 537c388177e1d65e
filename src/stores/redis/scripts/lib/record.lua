--[[
  Reading and writing one record, the value of KEYS[1]: one string (record layout 2, the bytes
  `src/stores/redis/record-layout.ts` reads and writes):

    B      layout version, 2
    c1     state: C CLAIMED, E EXECUTING, D COMPLETED, F FAILED_RETRYABLE, A ABANDONED
    d x7   attempt, rev, leaseUntil, replayUntil, expiresAt, createdAt, updatedAt: numbers as
           doubles (integers up to 2^53 are exact), times in epoch ms. replayUntil is a time
           on a COMPLETED record only; on any other it is the waiters' mark: 1 once a claim
           that will wait found the execution in progress, else 0 (see `waited` below)
    c64    owner: the holder's token, 64 lowercase hex
    H      the length of the texts that follow
    texts  fp, codec, policy, op: each a 16-bit length and its bytes
    ...    resp: the rest of the string, the stored response (COMPLETED only)

  The texts are written once, by the claim that creates or takes over the record (the store
  packs codec, policy and op for it), and carried unchanged by every transition: a script reads
  the fixed header and the fingerprint, never the other texts. One GET reads a record and one
  SET ... PXAT writes it, with the key's expiry at `expiresAt - 1` (the record's own lifetime,
  store.ts "Record lifetime"), so a record Redis has not expired yet and one it already dropped
  both read as absent.

  Layout 3 is what a claim of a new key writes without a script (`SET ... NX GET PX`, the
  store's fast path, docs/design.md §6): the bytes of layout 2 with version 3, times counted
  from the claim (leaseUntil holds the lease, expiresAt the lease and the retention, createdAt
  and updatedAt 0). Redis set the key's expiry from that PX (the lifetime less 1 ms, as
  write_record sets it) on its own clock, so PEXPIRETIME + 1 is the record's expiresAt and every
  time is PEXPIRETIME + 1 - expiresAt + the time: read here into
  the same epoch times as layout 2. Every write is in layout 2.

  Layout 4 is a record written with one plain command on the key (docs/design.md §6, "Record
  layouts"): the bytes of layout 2 with version 4, in any state, its times counted from the
  key's expiry as layout 3's are, and on a COMPLETED record replayUntil too (on any other it is
  the waiters' mark, as in layout 2). A reader of layout 3 alone would take a COMPLETED record's
  replayUntil for an epoch time and the record for run out: hence a version of its own, which
  an earlier build refuses as corrupt. Read here into epoch times; every write is in layout 2.

  Records written by version 1 of this library (layout 1: a hash of fields named as above,
  integers as decimal strings) are read too, until they expire: GET on them fails with
  WRONGTYPE, and the fields are read with HMGET instead. Every write is in layout 2.

  A value that does not hold a readable record raises an error reply starting with
  IDEMKIT_CORRUPT before anything is written; the TypeScript store reports a protocol error.

  A script's top level runs on every call: nothing here builds a table until it is needed.
]]

local RECORD_HEADER = '>Bc1dddddddc64H'
-- Where the texts start (1-based): 1 + 1 + 7 * 8 + 64 + 2 bytes of header before them.
local TEXTS_AT = 125

local function record_corrupt(key, what)
  error(redis.error_reply('IDEMKIT_CORRUPT record ' .. key .. ' ' .. what))
end

-- State names and their one-letter codes, by comparison (no table built per call).
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

-- A record of layout 1 (a hash), as layout 2 reads it.
local function read_legacy(key)
  local v = redis.call('HMGET', key,
    'state', 'owner', 'attempt', 'rev', 'op', 'fp', 'codec', 'policy',
    'leaseUntil', 'replayUntil', 'expiresAt', 'createdAt', 'updatedAt')
  local function int(i, name)
    local s = v[i]
    if type(s) ~= 'string' or #s > 15 or not string.find(s, '^%d+$') then
      record_corrupt(key, 'has no integer ' .. name)
    end
    return tonumber(s)
  end
  local function text(i, name)
    if type(v[i]) ~= 'string' then
      record_corrupt(key, 'has no ' .. name)
    end
    return v[i]
  end
  if not v[1] or not code_of_state(v[1]) then
    record_corrupt(key, 'has no known state')
  end
  local fp, codec, policy, op = text(6, 'fp'), text(7, 'codec'), text(8, 'policy'), text(5, 'op')
  return {
    state = v[1], owner = text(2, 'owner'), attempt = int(3, 'attempt'), rev = int(4, 'rev'),
    leaseUntil = int(9, 'leaseUntil'), replayUntil = v[1] == 'COMPLETED' and int(10, 'replayUntil') or 0,
    expiresAt = int(11, 'expiresAt'), createdAt = int(12, 'createdAt'), updatedAt = v[13] and int(13, 'updatedAt') or 0,
    fp = fp,
    texts = struct.pack('>Hc0Hc0Hc0Hc0', #fp, fp, #codec, codec, #policy, policy, #op, op),
    legacy = true,
  }
end

-- The record in `raw`, the string value GET read under `key` (layout 2, 3 or 4; PEXPIRETIME
-- reads the key's expiry for layouts 3 and 4).
local function parse_record(key, raw)
  local ok, version, code, attempt, rev, lease_until, replay_until, expires_at, created_at, updated_at,
    owner, texts_len = pcall(struct.unpack, RECORD_HEADER, raw)
  local state = ok and state_of_code(code)
  if not state or (version ~= 2 and version ~= 3 and version ~= 4) or #raw < TEXTS_AT + texts_len - 1 then
    record_corrupt(key, 'is not in record layout 2, 3 or 4')
  end
  if version ~= 2 then
    local expiry = redis.call('PEXPIRETIME', key)
    if expiry <= 0 then
      record_corrupt(key, 'is in layout ' .. version .. ' without an expiry')
    end
    -- The key expires one millisecond before the record (write_record).
    local at = expiry + 1
    local base = at - expires_at
    lease_until, expires_at, created_at, updated_at = base + lease_until, at, base + created_at, base + updated_at
    if version == 4 and state == 'COMPLETED' then
      replay_until = base + replay_until
    end
  end
  local fp_len = struct.unpack('>H', raw, TEXTS_AT)
  return {
    state = state, owner = owner, attempt = attempt, rev = rev,
    leaseUntil = lease_until, replayUntil = replay_until, expiresAt = expires_at,
    createdAt = created_at, updatedAt = updated_at,
    fp = string.sub(raw, TEXTS_AT + 2, TEXTS_AT + 1 + fp_len),
    raw = raw, texts_len = texts_len, relative = version ~= 2,
  }
end

-- Reads the record under `key`; nil when there is none. Does not judge expiry: that is
-- live_record's job, with the caller's clock reading.
local function read_record(key)
  local raw = redis.pcall('GET', key)
  if not raw then
    return nil
  end
  if type(raw) == 'table' then
    if raw.err and string.find(raw.err, 'WRONGTYPE', 1, true) and redis.call('TYPE', key).ok == 'hash' then
      return read_legacy(key)
    end
    record_corrupt(key, 'is not a string or a hash')
  end
  return parse_record(key, raw)
end

--[[
  The waiters' mark (docs/waiting.md, docs/design.md "Waiting duplicates"): the scripts that end
  an execution SPUBLISH only when a claim that will wait marked the record, so a completion that
  nobody waits for costs no PUBLISH. The mark is the replayUntil field of a record that is not
  COMPLETED (0 there in every earlier writer): set in place by SETRANGE (the key keeps its
  expiry, no other byte changes), carried by every transition and by a takeover, and gone
  with the completion, which writes the real replayUntil. A record of layout 1 counts as marked:
  its completion always notifies, as before.
]]
local WAITED_AT = 26 -- 0-based offset of replayUntil (SETRANGE): 1 + 1 + 3 * 8 bytes before it

-- True when a waiting claim marked the record (see above).
local function waited(rec)
  return rec.legacy == true or (rec.state ~= 'COMPLETED' and rec.replayUntil ~= 0)
end

-- Marks the record under `key` for its waiters, unless it is marked already. pcall: a server at
-- maxmemory refuses the write; the waiters then find the end by their poll.
local function mark_waited(key, rec)
  if waited(rec) then
    return
  end
  redis.pcall('SETRANGE', key, WAITED_AT, struct.pack('>d', 1))
end

-- The record as layout-2 bytes, `resp` after its texts.
local function pack_record(rec, resp)
  local texts = rec.texts or string.sub(rec.raw, TEXTS_AT, TEXTS_AT + rec.texts_len - 1)
  return struct.pack(RECORD_HEADER, 2, code_of_state(rec.state),
    rec.attempt, rec.rev, rec.leaseUntil, rec.replayUntil, rec.expiresAt, rec.createdAt, rec.updatedAt,
    rec.owner, #texts) .. texts .. (resp or '')
end

-- The whole record as layout-2 bytes, response included: what claim and inspect hand back.
local function record_bytes(key, rec)
  if rec.relative then
    return pack_record(rec, string.sub(rec.raw, TEXTS_AT + rec.texts_len))
  end
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

-- Every write goes through here: the record with `updatedAt` = now, and the key's expiry one
-- millisecond before its `expiresAt`, in one SET (which also replaces a layout-1 hash). Redis
-- drops a key once its expiry is past, and a record is absent from `expiresAt` on: with the
-- expiry at expiresAt - 1 Redis holds the key exactly while the record is live, so a record that
-- a plain GET or SET ... GET hands back is live by this rule too. PXAT takes plain digits (%d:
-- tostring would switch to exponent notation past 14 significant digits).
local function write_record(key, rec, now, resp)
  rec.updatedAt = now
  redis.call('SET', key, pack_record(rec, resp), 'PXAT', string.format('%d', rec.expiresAt - 1))
end
