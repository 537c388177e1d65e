#!lua flags=allow-oom
--[[
  Replace (operators only, `idemkit resolve`): a compare-and-set of a whole record. The record
  under KEYS[1] is replaced (or deleted) only if its header, the layout byte, the state, every
  number and the owner, is still the one the operator read: a record that changed since
  (renewed, completed, taken over) is left alone. The waiters' mark (lib/record `waited`: the
  replayUntil bytes of a record not COMPLETED) is not a change: it is compared as 0, the value
  the store's `read()` shows.

  KEYS[1]  the scope's record key

  ARGV[1]  the header the operator read (the record's first bytes)
  ARGV[2]  the new record's bytes, or '' to delete the record
  ARGV[3]  the new record's expiry, epoch ms (PXAT)

  Replies: 1 when replaced or deleted, 0 when the record changed since or is gone. A change is
  announced with SPUBLISH on the key's channel (see lib/notify.lua), so waiting requests wake.

  The one script that does not read TIME: it decides nothing by the clock. The new record's
  times, ARGV[3] among them, come from the Redis clock the operator's read took (`read()`).
  A record in layout 3 or 4 (times counted from the key's expiry, lib/record) is compared as
  the layout-2 bytes it reads as, which is what the operator read.
]]
--- @include "lib/record"

local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
local layout = string.byte(current, 1)
if layout == 3 or layout == 4 then
  current = record_bytes(KEYS[1], parse_record(KEYS[1], current))
end
local header = string.sub(current, 1, #ARGV[1])
if #header >= 34 and string.sub(header, 2, 2) ~= 'D' then
  header = string.sub(header, 1, 26) .. string.rep('\0', 8) .. string.sub(header, 35)
end
if header ~= ARGV[1] then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  -- The key expires one millisecond before the record, as every write sets it (lib/record).
  redis.call('SET', KEYS[1], ARGV[2], 'PXAT', string.format('%d', tonumber(ARGV[3]) - 1))
end
redis.pcall('SPUBLISH', KEYS[1], 'replaced')
return 1
