-- KEYS[1] packet hash   KEYS[2] inbox queued   KEYS[3] inbox claimed
-- KEYS[4] inbox failed  KEYS[5] inbox expiring KEYS[6] inbox expired   KEYS[7] packet log
-- ARGV[1] packet id     ARGV[2] from-state it must be in     ARGV[3] to-state
-- (failed or expired -> queued is an operator's requeue: a fresh start, expiry and
-- delivery count cleared; the log keeps the history)
-- ARGV[4] acting agent; when not "" and the packet is claimed, it must be the claimant
-- ARGV[5] reason        ARGV[6] now (ISO)      ARGV[7] now (µs)       ARGV[8] error text or ""
-- Returns {1, from, job_seq}; {-1} unknown packet; {0, state} wrong state;
-- {-2, claimant} when another agent holds the claim.
-- Runs after move.lua (the loader puts it in front): move() is defined.

local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return {-1}
end
if state ~= ARGV[2] then
  return {0, state}
end
local claimant = redis.call('HGET', KEYS[1], 'claimed_by') or ''
if ARGV[4] ~= '' and state == 'claimed' and claimant ~= ARGV[4] then
  return {-2, claimant}
end
local to = ARGV[3]
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('HDEL', KEYS[1], 'lease_until')
if state ~= 'claimed' and to == 'queued' then
  redis.call('ZREM', KEYS[5], ARGV[1])
  redis.call('HSET', KEYS[1], 'expires_us', '', 'deliveries', 0, 'error', '')
end
if ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'error', ARGV[8])
end
if to == 'queued' then
  redis.call('ZADD', KEYS[2], redis.call('HGET', KEYS[1], 'created_us'), ARGV[1])
  redis.call('HINCRBY', KEYS[1], 'job_seq', 1)
else
  redis.call('ZREM', KEYS[5], ARGV[1])
  if to == 'failed' then
    redis.call('ZADD', KEYS[4], ARGV[7], ARGV[1])
  end
end
move(KEYS[1], KEYS[7], to, ARGV[4], ARGV[5], ARGV[6])
return {1, state, redis.call('HGET', KEYS[1], 'job_seq')}
