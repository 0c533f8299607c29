-- KEYS[1] record head hash   KEYS[2..n+1] the hashes of versions 1..n
-- KEYS[n+2] (on one Redis only) the namespace's search stats hash: the bytes freed are taken
-- off its count of stored value bytes here (on a cluster the caller does, after)
-- ARGV[1] the version the caller built on (n)   ARGV[2] forgotten at   ARGV[3] by
-- ARGV[4] reason   ARGV[5] the empty value (msgpack nil)
-- ARGV[6..n+5] tombstone hash of versions 1..n
-- Replaces every version's value by a tombstone; hashes and links stay, so the chain still
-- verifies. Returns {1, the value bytes freed}, or {0} when the record moved on (the caller
-- retries).

if tonumber(redis.call('HGET', KEYS[1], 'version') or '0') ~= tonumber(ARGV[1]) then
  return {0}
end
local n = tonumber(ARGV[1])
local freed = 0
for i = 2, n + 1 do
  freed = freed + redis.call('HSTRLEN', KEYS[i], 'value') - #ARGV[5]
  redis.call('HSET', KEYS[i], 'value', ARGV[5], 'tombstone_hash', ARGV[i + 4],
             'forgotten_at', ARGV[2], 'forgotten_by', ARGV[3], 'forgotten_reason', ARGV[4])
end
redis.call('HSET', KEYS[1], 'forgotten_at', ARGV[2])
if #KEYS > n + 1 then
  redis.call('HINCRBY', KEYS[n + 2], 'bytes', -freed)
end
return {1, freed}
