-- KEYS[1] session hash   KEYS[2] the session's observation list
-- KEYS[3..] the hash of each observation ARGV names, in its order
-- ARGV[1..] observation ids
-- Deletes each listed observation the session holds and lowers its observation_count by the
-- number deleted (ids it does not hold, or listed twice, count once or not at all).
-- Returns the ids deleted, or -1 when there is no such session (nothing is written).

if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local deleted = {}
for i = 1, #ARGV do
  if redis.call('LREM', KEYS[2], 0, ARGV[i]) > 0 then
    redis.call('DEL', KEYS[2 + i])
    deleted[#deleted + 1] = ARGV[i]
  end
end
if #deleted > 0 then
  redis.call('HINCRBY', KEYS[1], 'observation_count', -#deleted)
end
return deleted
