-- KEYS[1] packet hash   KEYS[2] packet log   KEYS[3] inbox held   KEYS[4] inbox queued
-- ARGV[1] packet id     ARGV[2] now (ISO)    ARGV[3] the sender
-- A packet held until its sender's session ended becomes claimable: held -> queued, in
-- the queue at the time it was handed off. Returns 1, or 0 when it is not held (sent
-- already, or expired).
-- Runs after move.lua (the loader puts it in front).

local created = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not created then
  return 0
end
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('HGET', KEYS[1], 'state') ~= 'held' then
  return 0
end
redis.call('ZADD', KEYS[4], created, ARGV[1])
move(KEYS[1], KEYS[2], 'queued', ARGV[3], "the sender's session ended", ARGV[2], 'held')
return 1
