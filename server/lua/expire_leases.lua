-- KEYS[1] inbox claimed KEYS[2] inbox queued   KEYS[3] inbox failed   KEYS[4] packet prefix
-- KEYS[5] inbox expiring
-- ARGV[1] now (µs)      ARGV[2] now (ISO)      ARGV[3] max deliveries ARGV[4] batch size
-- Returns {requeued ids, failed ids}: leases that ran out go back to the queue (front
-- position kept, redelivery counted) or, after max deliveries, to failed.
-- Runs after move.lua (the loader puts it in front): move() is defined.

local requeued, failed = {}, {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[4])
for _, id in ipairs(due) do
  local packet = KEYS[4] .. id
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', packet, 'lease_until')
  if tonumber(redis.call('HGET', packet, 'deliveries') or '0') >= tonumber(ARGV[3]) then
    redis.call('HSET', packet, 'error', 'max deliveries')
    redis.call('ZADD', KEYS[3], ARGV[1], id)
    redis.call('ZREM', KEYS[5], id)
    move(packet, 'failed', '', 'max deliveries', ARGV[2])
    table.insert(failed, id)
  else
    redis.call('HINCRBY', packet, 'redeliveries', 1)
    redis.call('HINCRBY', packet, 'job_seq', 1)
    redis.call('ZADD', KEYS[2], redis.call('HGET', packet, 'created_us'), id)
    move(packet, 'queued', '', 'lease expired', ARGV[2])
    table.insert(requeued, id)
  end
end
return {requeued, failed}
