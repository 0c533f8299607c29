-- KEYS[1] inbox expiring  KEYS[2] inbox queued  KEYS[3] packet prefix  KEYS[4] inbox expired
-- ARGV[1] now (µs)        ARGV[2] now (ISO)     ARGV[3] batch size
-- Returns the ids expired: queued packets past their expiry. A claimed packet keeps its
-- entry, so that it can still expire if it is released back to the queue.
-- Runs after move.lua (the loader puts it in front): move() is defined.

local expired = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(due) do
  local packet = KEYS[3] .. id
  local state = redis.call('HGET', packet, 'state')
  if state == 'queued' then
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZADD', KEYS[4], ARGV[1], id)
    move(packet, 'expired', '', 'expired before it was claimed', ARGV[2])
    table.insert(expired, id)
  end
  if state ~= 'claimed' then
    redis.call('ZREM', KEYS[1], id)
  end
end
return expired
