-- KEYS[1] session hash   KEYS[2] the session's touched hash
-- ARGV[1] agent          ARGV[2] now (ISO)      ARGV[3..] ref/version pairs seen
-- Creates the session on first use, reopens an abandoned one, records activity and what it
-- saw. Returns the session's status.

redis.call('HSETNX', KEYS[1], 'agent', ARGV[1])
redis.call('HSETNX', KEYS[1], 'started_at', ARGV[2])
redis.call('HSETNX', KEYS[1], 'status', 'active')
if redis.call('HGET', KEYS[1], 'status') == 'abandoned' then
  redis.call('HSET', KEYS[1], 'status', 'active')
end
redis.call('HSET', KEYS[1], 'last_activity_at', ARGV[2])
if #ARGV > 2 then
  redis.call('HSET', KEYS[2], unpack(ARGV, 3))
end
return redis.call('HGET', KEYS[1], 'status')
