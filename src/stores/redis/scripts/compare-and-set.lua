#!lua flags=allow-oom
--[[
  Compare-and-set (oneCommandCompletion, on a server without SET ... IFEQ): writes ARGV[2] under
  KEYS[1], expiring ARGV[3] ms from now, only when the key holds exactly ARGV[1]; what SET ...
  IFEQ does on Valkey 8.1 and Redis 8.4 (docs/design.md §6, "A one-command completion"). The
  store sends it to complete an execution it claimed without a script: ARGV[1] the claim's
  record as written, ARGV[2] the COMPLETED record in layout 4, whose times count from the key's
  expiry that the PX sets. Decides nothing, by the clock or otherwise: any other value, no key,
  or a layout-1 hash (an error, WRONGTYPE) goes back to the store, which completes with
  complete.lua.

  KEYS[1]  the scope's record key
  ARGV[1]  the value the key must hold, bytes
  ARGV[2]  the value to write, bytes
  ARGV[3]  the key's lifetime in ms, at least 1

  Replies: 1 written, 0 not (the key holds something else, or nothing).

  Commands: GET, and SET ... PX when the value matches. Flag allow-oom: as complete.lua's, a
  completion is written at maxmemory.
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
