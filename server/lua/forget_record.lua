-- KEYS[1] record head hash   KEYS[2..n+1] the hashes of versions 1..n
-- ARGV[1] the version the caller built on (n)   ARGV[2] forgotten at   ARGV[3] by
-- ARGV[4] reason   ARGV[5] the empty value (msgpack nil)
-- ARGV[6..n+5] tombstone hash of versions 1..n
-- Replaces every version's value by a tombstone; hashes and links stay, so the chain still
-- verifies. Returns {1, the value bytes freed}, or {0} when the record moved on (the caller
-- retries).

if tonumber(redis.call('HGET', KEYS[1], 'version') or '0') ~= tonumber(ARGV[1]) then
  return {0}
end
local freed = 0
for i = 2, #KEYS do
  freed = freed + redis.call('HSTRLEN', KEYS[i], 'value') - #ARGV[5]
  redis.call('HSET', KEYS[i], 'value', ARGV[5], 'tombstone_hash', ARGV[i + 4],
             'forgotten_at', ARGV[2], 'forgotten_by', ARGV[3], 'forgotten_reason', ARGV[4])
end
redis.call('HSET', KEYS[1], 'forgotten_at', ARGV[2])
return {1, freed}
