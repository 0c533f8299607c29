-- KEYS[1] packet hash   KEYS[2] inbox queued   KEYS[3] inbox expiring   KEYS[4] inbox all
-- ARGV[1] packet id     ARGV[2] created (µs)   ARGV[3] expires (µs) or ""
-- ARGV[4] created_at    ARGV[5] sender         ARGV[6..] field/value pairs of the packet
-- Returns {the packet's fields, its transition log} as stored.
-- Runs after move.lua (the loader puts it in front): move() is defined.

redis.call('HSET', KEYS[1], unpack(ARGV, 6))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
end
move(KEYS[1], 'queued', ARGV[5], 'handed off', ARGV[4])
return {redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[1] .. ':log', 0, -1)}
