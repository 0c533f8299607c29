-- A Lua function, not a script: no keys and no arguments of its own.
-- Shared by the packet scripts: move a packet to a new state and append the transition
-- (time, agent, from-state, to-state, reason) to its log.

local function move(packet, to, agent, reason, at)
  local from = redis.call('HGET', packet, 'state') or 'new'
  redis.call('HSET', packet, 'state', to, 'updated_at', at)
  redis.call('RPUSH', packet .. ':log',
             cmsgpack.pack({at = at, agent = agent, from = from, to = to, reason = reason}))
end
