-- KEYS[1] the set of the server's namespaces (the sweeps visit each)
-- ARGV[1] the namespace   ARGV[2] how many namespaces the server may hold
-- Adds the namespace unless it is new and the set already holds ARGV[2], in one step, so
-- first writes to new namespaces at the same moment never pass the limit together.
-- Returns 1 when the namespace was held already, 2 when it is added now, 0 when the limit
-- refused it.

if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
  return 1
end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('SADD', KEYS[1], ARGV[1])
return 2
