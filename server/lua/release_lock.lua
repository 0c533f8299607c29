-- KEYS[1] a lock key (the sweep lock)
-- ARGV[1] the token this process wrote when it took the lock
-- Deletes the lock only if it is still ours (it may have expired and been taken since).
-- Returns 1 when released, 0 otherwise.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
