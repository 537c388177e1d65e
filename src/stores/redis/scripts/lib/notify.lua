--[[
  Tells the requests waiting for this record (`inFlight: { waitMs }`) that its execution
  ended: SPUBLISH on the shard channel named like the record's key, so on a Cluster it stays on
  the key's shard. Sent only when a claim that will wait marked the record (lib/record
  `waited`): a completion nobody waits for publishes nothing. pcall: a server or ACL user that
  refuses SPUBLISH loses only the notification (the waiters also poll), never the transition.
]]

local function notify(key, state)
  redis.pcall('SPUBLISH', key, state)
end
