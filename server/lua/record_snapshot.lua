-- KEYS[1] a record's head hash   KEYS[2] its outcomes log
-- KEYS[3..] the hashes of its versions past those the caller has read
-- ARGV the head's fields to read
-- Returns {the head's fields (HMGET), the outcomes log, each version given (HGETALL)}, all
-- read at one instant: verify holds a head to its chains with no write landing between the
-- reads (the versions the caller read before are never changed by a write).

local versions = {}
for i = 3, #KEYS do
  versions[#versions + 1] = redis.call('HGETALL', KEYS[i])
end
return {redis.call('HMGET', KEYS[1], unpack(ARGV)), redis.call('LRANGE', KEYS[2], 0, -1), versions}
