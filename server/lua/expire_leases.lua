-- KEYS[1] inbox claimed KEYS[2] inbox queued   KEYS[3] inbox failed   KEYS[4] inbox expiring
-- KEYS[5..] each candidate's packet hash and packet log, in pairs
-- ARGV[1] now (µs)      ARGV[2] now (ISO)      ARGV[3] max deliveries
-- ARGV[4..] the candidates' ids (read by the caller from KEYS[1] as due), one per pair
-- Returns {requeued ids, failed ids}: leases that ran out go back to the queue (front
-- position kept, redelivery counted) or, after max deliveries, to failed. A candidate whose
-- lease is no longer due (renewed, settled since it was read) is left alone.
-- Runs after move.lua and due.lua (the loader puts them in front).

local requeued, failed = {}, {}
each_due(KEYS[1], tonumber(ARGV[1]), 5, 4, function(id, packet, log)
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', packet, 'lease_until')
  if tonumber(redis.call('HGET', packet, 'deliveries') or '0') >= tonumber(ARGV[3]) then
    redis.call('HSET', packet, 'error', 'max deliveries')
    redis.call('ZADD', KEYS[3], ARGV[1], id)
    redis.call('ZREM', KEYS[4], id)
    move(packet, log, 'failed', '', 'max deliveries', ARGV[2])
    table.insert(failed, id)
  else
    redis.call('HINCRBY', packet, 'redeliveries', 1)
    redis.call('HINCRBY', packet, 'job_seq', 1)
    redis.call('ZADD', KEYS[2], redis.call('HGET', packet, 'created_us'), id)
    move(packet, log, 'queued', '', 'lease expired', ARGV[2])
    table.insert(requeued, id)
  end
end)
return {requeued, failed}
