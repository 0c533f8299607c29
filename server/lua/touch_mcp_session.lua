-- KEYS[1] one owner's open MCP sessions (sorted set: session id -> idle deadline, ms)
-- ARGV[1] the session id   ARGV[2] idle timeout (ms)
-- A request on the session: its idle deadline moves on, by Redis' own clock.
-- Returns 1 when the session is open, 0 when it is unknown or was idle past its deadline
-- (then it is dropped).

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not deadline then
  return 0
end
if tonumber(deadline) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local idle = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now + idle, ARGV[1])
redis.call('PEXPIRE', KEYS[1], idle)
return 1
