-- KEYS[1] packet hash   KEYS[2] inbox queued   KEYS[3] inbox expiring   KEYS[4] inbox all
-- ARGV[1] packet id     ARGV[2] created (µs)   ARGV[3] expires (µs) or ""
-- ARGV[4] created_at    ARGV[5] sender         ARGV[6] how many field/value arguments (F)
-- ARGV[7..6+F] field/value pairs of the packet
-- On a cluster the caller has taken the id and resolved the pins (a field) before, and
-- sends the inbox's registration and the event apart: their keys are in other slots.
-- On one Redis the whole handoff is this call: the pins resolved, the id taken, the inbox's
-- registration before the packet, and its event and RQ job after it. Then come:
-- KEYS[5] the set of namespaces   KEYS[6] the namespace's inboxes   KEYS[7] its events
-- KEYS[8] the packet-to-inbox hash   KEYS[9] every packet by creation time
-- ARGV[7+F] the namespace   ARGV[8+F] the receiver   ARGV[9+F] how many XADD arguments the
-- event has (E), ARGV[10+F..9+F+E] those arguments from MAXLEN on (activity.event_args)
-- ARGV[10+F+E] the packet's RQ job as commands for commands.lua ("" when the queue is on
-- another Redis)
-- ARGV[11+F+E] ARGV[12+F+E] how a record's head key is spelled around its ref (prefix,
-- suffix: keys.around_ref; the heads are not declared, one Redis only)
-- ARGV[13+F+E] how many pins were asked for (P), or -1 for the records the sender's session
-- touched, at the versions it saw: then ARGV[14+F+E] is that session's touched hash, or ""
-- for no session (no pins); else ARGV[14+F+E..13+F+E+2P] each pin's ref and version ("" for
-- the current one)
-- Returns {"stored", pins} with pins the resolved pins ({ref, version, ref, version, ...}:
-- empty on a cluster), and a third element, the error, when the event or the job failed
-- (the packet stands: the sweep enqueues a missing job). Nothing is written when it returns
-- {"taken"} (another packet has this id) or {"refused", index, current} (pin index, from 0,
-- names no record, current "", or a version after the current one).
-- Runs after move.lua, commands.lua and follow_ups.lua (the loader puts them in front).

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

-- The pins asked for, resolved, or nil and the refusal's reply. first: the first argument
-- of the pins' part (the head key's prefix).
local function resolved_pins(first)
  local prefix, suffix, count = ARGV[first], ARGV[first + 1], tonumber(ARGV[first + 2])
  local pins = {}
  if count < 0 then
    if ARGV[first + 3] ~= '' then
      local touched = redis.call('HGETALL', ARGV[first + 3])
      for i = 1, #touched, 2 do
        pins[#pins + 1] = {touched[i], tonumber(touched[i + 1])}
      end
      table.sort(pins, function(a, b) return bytewise_before(a[1], b[1]) end)
    end
    return pins
  end
  for i = 0, count - 1 do
    local ref, wanted = ARGV[first + 3 + 2 * i], ARGV[first + 4 + 2 * i]
    local current = redis.call('HGET', prefix .. ref .. suffix, 'version')
    if not current then
      return nil, {'refused', i, ''}
    end
    if wanted == '' then
      wanted = current
    elseif tonumber(wanted) > tonumber(current) then
      return nil, {'refused', i, current}
    end
    pins[#pins + 1] = {ref, tonumber(wanted)}
  end
  return pins
end

local fields = tonumber(ARGV[6])
local tail = 7 + fields
local packet = {unpack(ARGV, 7, 6 + fields)}
local reply = {'stored', {}}
local job
if KEYS[5] then
  job = tail + 3 + tonumber(ARGV[tail + 2])
  local pins, refusal = resolved_pins(job + 1)
  if not pins then
    return refusal
  end
  if redis.call('HSETNX', KEYS[8], ARGV[1], ARGV[tail + 1]) == 0 then
    return {'taken'}
  end
  redis.call('ZADD', KEYS[9], 'NX', ARGV[2], ARGV[1])
  packet[#packet + 1] = 'pins'
  packet[#packet + 1] = cmsgpack.pack(pins)
  for _, pin in ipairs(pins) do
    reply[2][#reply[2] + 1] = pin[1]
    reply[2][#reply[2] + 1] = pin[2]
  end
  redis.call('SADD', KEYS[5], ARGV[tail])
  redis.call('SADD', KEYS[6], ARGV[tail + 1])
end
move(KEYS[1], 'queued', ARGV[5], 'handed off', ARGV[4], 'new', packet)
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
end
if KEYS[5] then
  local follow_ups = {function()
    redis.call('XADD', KEYS[7], unpack(ARGV, tail + 3, job - 1))
  end}
  if ARGV[job] ~= '' then
    follow_ups[2] = function()
      run_commands(ARGV[job])
    end
  end
  reply[3] = run_follow_ups(follow_ups)
end
return reply
