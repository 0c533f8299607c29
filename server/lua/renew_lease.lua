-- KEYS[1] packet hash   KEYS[2] inbox claimed
-- ARGV[1] packet id     ARGV[2] the claimant   ARGV[3] its job id
-- ARGV[4] new lease deadline (µs)              ARGV[5] the same as ISO text
-- Extends a claim's lease while its handler runs; 0 when the packet is no longer claimed by
-- that claimant and job (the heartbeat then stops).

if redis.call('HGET', KEYS[1], 'state') ~= 'claimed' or redis.call('HGET', KEYS[1], 'claimed_by') ~= ARGV[2]
    or redis.call('HGET', KEYS[1], 'job') ~= ARGV[3] then
  return 0
end
redis.call('ZADD', KEYS[2], 'XX', ARGV[4], ARGV[1])
redis.call('HSET', KEYS[1], 'lease_until', ARGV[5])
return 1
