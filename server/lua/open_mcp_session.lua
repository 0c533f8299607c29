-- KEYS[1] one owner's open MCP sessions (sorted set: session id -> idle deadline, ms)
-- ARGV[1] the session id to open   ARGV[2] idle timeout (ms)   ARGV[3] the most one owner holds
-- Drops the owner's sessions idle past their deadline (by Redis' own clock, the same for
-- every API process and replica), then opens the new one if the owner holds fewer than the
-- most. The set expires with its last session.
-- Returns 1 when opened, 0 when the owner already holds the most.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local idle = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + idle, ARGV[1])
redis.call('PEXPIRE', KEYS[1], idle)
return 1
