#!lua flags=allow-oom
--[[
  Touch (durability only): rewrites the record under KEYS[1] as it is, so that the replication
  stream carries it again from this connection. A WAIT that follows on the same connection then
  covers the record whatever the Redis version counts: from Redis 7.2 on, a connection's WAIT
  offset moves only when that connection's own command propagates, so a call that answered
  without writing (a re-sent completion answering ALREADY, a claim answering REPLAYED_ACQUIRE), or
  a write made on an earlier connection, would otherwise leave the WAIT vouching for nothing
  (docs/durability.md).

  KEYS[1]  the scope's record key

  Replies: 1 when the record was rewritten, 0 when there is none. Decides nothing, by the clock
  or otherwise: the record's bytes and expiry are kept as they are (SET ... KEEPTTL; for a
  record of layout 1, a hash, one field set to its own value).

  Commands: TYPE, GET and SET, or HGET and HSET.
]]
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' then
  redis.call('SET', KEYS[1], redis.call('GET', KEYS[1]), 'KEEPTTL')
  return 1
end
if kind == 'hash' then
  redis.call('HSET', KEYS[1], 'state', redis.call('HGET', KEYS[1], 'state'))
  return 1
end
return 0
