-- KEYS[1] a token's hash
-- ARGV[1] the time it was used
-- Notes the use only while the token exists: a token revoked since it was checked must not
-- come back as a hash holding nothing but last_used_at.
-- Returns 1 when noted, 0 when the token is gone.

if redis.call('HEXISTS', KEYS[1], 'record') == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'last_used_at', ARGV[1])
return 1
