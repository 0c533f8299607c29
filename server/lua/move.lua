-- A Lua function, not a script: no keys and no arguments of its own.
-- Shared by the packet scripts: move a packet (its hash) to a new state and append the
-- transition (time, agent, from-state, to-state, reason) to its log (a list). from: the state it is in, when the
-- caller has read it already (nil: read here); fields: more field-value pairs to write with
-- the state, in the same HSET (nil: none).

local function move(packet, log, to, agent, reason, at, from, fields)
  from = from or redis.call('HGET', packet, 'state') or 'new'
  local write = {'HSET', packet, 'state', to, 'updated_at', at}
  for _, item in ipairs(fields or {}) do
    write[#write + 1] = item
  end
  redis.call(unpack(write))
  redis.call('RPUSH', log,
             cmsgpack.pack({at = at, agent = agent, from = from, to = to, reason = reason}))
end
