-- KEYS[1] record head hash   KEYS[2] the hash of version ARGV[1]
-- KEYS[3] session hash   KEYS[4] the session's touched hash   KEYS[5] the sessions listing
-- KEYS[6] the active sessions   KEYS[7] the namespaces the sweep visits
-- KEYS[8] the session's log of sightings
-- ARGV[1] the version wanted, or the one believed current when ARGV[2] is "current"
-- ARGV[2] "current" when the current version is wanted, else ""
-- ARGV[3] ref   ARGV[4] session id   ARGV[5] agent   ARGV[6] now (ISO)   ARGV[7] now (µs)
-- ARGV[8] namespace
-- recall.lua, and when the version is there and not forgotten, the session saw it: what
-- Activity.touch does after a read, in the same call (one Redis holds both).
-- Returns what read_version.lua returns.

local found = read_version(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
if #found == 2 and #found[2] > 0 and redis.call('HEXISTS', KEYS[2], 'tombstone_hash') == 0 then
  touch_session({KEYS[3], KEYS[4], KEYS[8]}, {ARGV[5], ARGV[6], ARGV[3], ARGV[1]})
  redis.call('ZADD', KEYS[5], 'NX', ARGV[7], ARGV[4])
  redis.call('ZADD', KEYS[6], ARGV[7], ARGV[4])
  redis.call('SADD', KEYS[7], ARGV[8])
end
return found
