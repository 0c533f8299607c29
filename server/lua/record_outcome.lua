-- KEYS[1] record head hash
-- KEYS[2] the record's outcomes log (list)
-- ARGV[1] the version the caller built on   ARGV[2] the log length it built on
-- ARGV[3] the confidence after the move     ARGV[4] counter field: successes | failures
-- ARGV[5] the new entry's sha256            ARGV[6] the entry (msgpack)
-- An outcome settles the record's contest (write_version.lua), if it has one.
-- Returns {1, seq, 1 when it settled a contest else 0} on success, {0, version, length}
-- when the record moved on.

local version = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
local length = redis.call('LLEN', KEYS[2])
if version ~= tonumber(ARGV[1]) or length ~= tonumber(ARGV[2]) then
  return {0, version, length}
end
redis.call('HSET', KEYS[1], 'confidence', ARGV[3], 'outcome_hash', ARGV[5])
redis.call('HINCRBY', KEYS[1], ARGV[4], 1)
local settled = redis.call('HDEL', KEYS[1], 'contested', 'contested_base')
return {1, redis.call('RPUSH', KEYS[2], ARGV[6]), math.min(settled, 1)}
