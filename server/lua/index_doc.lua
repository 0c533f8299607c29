-- KEYS[1] search docs hash   KEYS[2] search meta hash   KEYS[3] search stats hash
-- KEYS[4] the prefix of the term postings (same hash tag)
-- ARGV[1] doc id   ARGV[2] its entry (msgpack {kind, project, agent, len, terms}), or "" to
-- only remove the doc   ARGV[3] its meta ("kind\tproject\tagent")   ARGV[4] its length
-- ARGV[5..] term / posting score pairs
-- (Re)indexes one document in one call: the old postings and totals are taken out first.
-- Returns 1 if the doc was indexed before, else 0.

local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local entry = cmsgpack.unpack(old)
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HINCRBY', KEYS[3], 'docs', -1)
  redis.call('HINCRBY', KEYS[3], 'total_length', -entry['len'])
  for _, term in ipairs(entry['terms']) do
    redis.call('ZREM', KEYS[4] .. term, ARGV[1])
  end
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  redis.call('HINCRBY', KEYS[3], 'docs', 1)
  redis.call('HINCRBY', KEYS[3], 'total_length', ARGV[4])
  for i = 5, #ARGV, 2 do
    redis.call('ZADD', KEYS[4] .. ARGV[i], ARGV[i + 1], ARGV[1])
  end
end
if old then
  return 1
end
return 0
