-- KEYS[1] the set of the server's namespaces (the sweeps visit each)
-- KEYS[2] (when a token's quota applies) the set of the namespaces that token created
-- ARGV[1] the namespace   ARGV[2] how many namespaces the server may hold
-- ARGV[3] (with KEYS[2]) how many one token may create
-- Adds the namespace unless it is new and the server holds ARGV[2] already, or the token
-- created ARGV[3] already, in one step, so first writes to new namespaces at the same
-- moment never pass a limit together.
-- Returns 1 when the namespace was held already, 2 when it is added now, 0 when the
-- server's limit refused it, -1 when the token's did.

if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
  return 1
end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
if KEYS[2] then
  if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[3]) then
    return -1
  end
  redis.call('SADD', KEYS[2], ARGV[1])
end
redis.call('SADD', KEYS[1], ARGV[1])
return 2
