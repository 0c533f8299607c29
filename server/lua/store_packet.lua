-- A Lua function, not a script: no keys and no arguments of its own.
-- Shared by create_packet and hand_off: store a new packet in its inbox. keys: the packet
-- hash, its log, the inbox's set it waits in (queued, or held until its sender's session
-- ends), expiring and all sets; args: the packet id, created (µs), expires (µs) or "",
-- created_at (ISO), the sender, its first state ("queued" or "held"), then the packet's
-- field/value pairs (a table). Runs after move.lua.

local function store_packet(keys, id, created, expires, created_at, sender, state, fields)
  move(keys[1], keys[2], state, sender, 'handed off', created_at, 'new', fields)
  redis.call('ZADD', keys[3], created, id)
  redis.call('ZADD', keys[5], created, id)
  if expires ~= '' then
    redis.call('ZADD', keys[4], expires, id)
  end
end
