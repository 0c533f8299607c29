-- KEYS[1] item deadlines   KEYS[2] item ttls
-- ARGV[1] what to do: 'set' (ARGV[3] seconds), 'clear', 'refresh' (items with a ttl start
--         it again) or 'read'    ARGV[2] now (µs)    ARGV[4..] the items' refs
-- Sets, clears, refreshes or reads the expiry of LangGraph store items. Returns each ref's
-- deadline (µs, as text) after the change, or false when it has none.

local action, now = ARGV[1], tonumber(ARGV[2])
local found = {}
for i = 4, #ARGV do
  local ref = ARGV[i]
  if action == 'set' then
    redis.call('HSET', KEYS[2], ref, ARGV[3])
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]) * 1000000, ref)
  elseif action == 'clear' then
    redis.call('HDEL', KEYS[2], ref)
    redis.call('ZREM', KEYS[1], ref)
  elseif action == 'refresh' then
    local seconds = redis.call('HGET', KEYS[2], ref)
    if seconds then
      redis.call('ZADD', KEYS[1], now + tonumber(seconds) * 1000000, ref)
    end
  end
  found[#found + 1] = redis.call('ZSCORE', KEYS[1], ref)
end
return found
