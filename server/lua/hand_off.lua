-- KEYS[1] packet hash   KEYS[2] packet log   KEYS[3] inbox queued (or held)   KEYS[4] expiring
-- KEYS[5] inbox all     KEYS[6] the set of namespaces   KEYS[7] the namespace's inboxes
-- KEYS[8] its events    KEYS[9] the packet-to-inbox hash   KEYS[10] every packet by time
-- KEYS[11] the namespace's pins of live packets (keys.pinned)
-- KEYS[12..] for pins asked for, each pin's record head hash; for the session's touched
--            records, that session's touched hash (none without a session: no pins)
-- ARGV[1] packet id     ARGV[2] created (µs)   ARGV[3] expires (µs) or ""
-- ARGV[4] created_at    ARGV[5] sender         ARGV[6] first state: queued or held
-- ARGV[7] the namespace   ARGV[8] the receiver
-- ARGV[9] how many pins were asked for (P), or -1 for the records the sender's session
--         touched, at the versions it saw
-- ARGV[10..9+P] each pin's version ("" for the current one), in the order of their heads
-- ARGV[10+P] how many XADD arguments the event has (E), ARGV[11+P..10+P+E] those arguments
--           from MAXLEN on (activity.event_args)
-- ARGV[11+P+E] the pins' refs, in the order of their heads (a msgpack list)
-- ARGV[12+P+E..] field/value pairs of the packet
-- A whole handoff on one Redis: the pins resolved (a refused pin writes nothing), the id
-- taken, the inbox's registration before the packet, and its event after it.
-- Returns {"stored", pins} with pins the resolved pins ({ref, version, ref, version, ...}),
-- and a third element, the error, when the event failed (the packet stands). Nothing is
-- written when it returns {"taken"} (another packet has this id) or {"refused", index,
-- current} (pin index, from 0, names no record, current "", or a version after the current
-- one).
-- Runs after move.lua, store_packet.lua and follow_ups.lua (the loader puts them in front).

-- Whether a sorts before b byte by byte, as Python sorts str refs (Lua's < follows the
-- server's collation locale, which may not be C).
local function bytewise_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

local count = tonumber(ARGV[9])
local event_first = 11 + math.max(count, 0)
local event_last = event_first - 1 + tonumber(ARGV[event_first - 1])
local refs = cmsgpack.unpack(ARGV[event_last + 1])

-- The pins asked for, resolved, or nil and the refusal's reply.
local function resolved_pins()
  local pins = {}
  if count < 0 then
    if KEYS[12] then
      local touched = redis.call('HGETALL', KEYS[12])
      for i = 1, #touched, 2 do
        pins[#pins + 1] = {touched[i], tonumber(touched[i + 1])}
      end
      table.sort(pins, function(a, b) return bytewise_before(a[1], b[1]) end)
    end
    return pins
  end
  for i = 1, count do
    local wanted = ARGV[9 + i]
    local current = redis.call('HGET', KEYS[11 + i], 'version')
    if not current then
      return nil, {'refused', i - 1, ''}
    end
    if wanted == '' then
      wanted = current
    elseif tonumber(wanted) > tonumber(current) then
      return nil, {'refused', i - 1, current}
    end
    pins[#pins + 1] = {refs[i], tonumber(wanted)}
  end
  return pins
end

local pins, refusal = resolved_pins()
if not pins then
  return refusal
end
if redis.call('HSETNX', KEYS[9], ARGV[1], ARGV[8]) == 0 then
  return {'taken'}
end
redis.call('ZADD', KEYS[10], 'NX', ARGV[2], ARGV[1])
local fields = {unpack(ARGV, event_last + 2)}
fields[#fields + 1] = 'pins'
fields[#fields + 1] = cmsgpack.pack(pins)
local reply = {'stored', {}}
for _, pin in ipairs(pins) do
  reply[2][#reply[2] + 1] = pin[1]
  reply[2][#reply[2] + 1] = pin[2]
end
redis.call('SADD', KEYS[6], ARGV[7])
redis.call('SADD', KEYS[7], ARGV[8])
store_packet(KEYS, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], fields)
for _, pin in ipairs(pins) do
  redis.call('ZADD', KEYS[11], 0, pin[1] .. '\0' .. ARGV[1])
end
reply[3] = run_follow_ups({function()
  redis.call('XADD', KEYS[8], unpack(ARGV, event_first, event_last))
end})
return reply
