-- KEYS[1] inbox expiring  KEYS[2] inbox queued  KEYS[3] inbox expired
-- KEYS[4..] each candidate's packet hash and packet log, in pairs
-- ARGV[1] now (µs)        ARGV[2] now (ISO)
-- ARGV[3..] the candidates' ids (read by the caller from KEYS[1] as due), one per pair
-- Returns the ids expired: queued packets past their expiry. A claimed or held packet keeps
-- its entry, so that it can still expire once it is released or sent to the queue. A candidate no
-- longer due (settled and requeued since it was read) is left alone.
-- Runs after move.lua and due.lua (the loader puts them in front).

local expired = {}
each_due(KEYS[1], tonumber(ARGV[1]), 4, 3, function(id, packet, log)
  local state = redis.call('HGET', packet, 'state')
  if state == 'queued' then
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZADD', KEYS[3], ARGV[1], id)
    move(packet, log, 'expired', '', 'expired before it was claimed', ARGV[2])
    table.insert(expired, id)
  end
  if state ~= 'claimed' and state ~= 'held' then
    redis.call('ZREM', KEYS[1], id)
  end
end)
return expired
