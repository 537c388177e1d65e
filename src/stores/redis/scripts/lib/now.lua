--[[
  Server time in integer milliseconds since the epoch, read from Redis TIME.

  Every lease and expiry decision is made with the store's clock, never a caller's (docs/design.md §2
  "Server time"): no timestamp ever travels in ARGV.
]]

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
