-- KEYS[1] packet hash   KEYS[2] inbox queued   KEYS[3] inbox expiring   KEYS[4] inbox all
-- ARGV[1] packet id     ARGV[2] created (µs)   ARGV[3] expires (µs) or ""
-- ARGV[4] created_at    ARGV[5] sender         ARGV[6] how many field/value arguments (F)
-- ARGV[7..6+F] field/value pairs of the packet
-- On one Redis, the inbox's registration before the packet, and its event and RQ job after
-- it, come in the same call (a cluster sends them apart: these keys are in other slots).
-- Absent on a cluster:
-- KEYS[5] the set of namespaces   KEYS[6] the namespace's inboxes   KEYS[7] its events
-- ARGV[7+F] the namespace   ARGV[8+F] the receiver   ARGV[9+F] how many XADD arguments the
-- event has (E), ARGV[10+F..9+F+E] those arguments from MAXLEN on (activity.event_args)
-- ARGV[10+F+E] the packet's RQ job as commands for commands.lua ("" when the queue is on
-- another Redis)
-- Returns {the packet's fields, its transition log} as stored; a third element, the error,
-- when the event or the job failed (the packet stands: the sweep enqueues a missing job).
-- Runs after move.lua, commands.lua and follow_ups.lua (the loader puts them in front).

local fields = tonumber(ARGV[6])
local tail = 7 + fields
if KEYS[5] then
  redis.call('SADD', KEYS[5], ARGV[tail])
  redis.call('SADD', KEYS[6], ARGV[tail + 1])
end
redis.call('HSET', KEYS[1], unpack(ARGV, 7, 6 + fields))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
end
move(KEYS[1], 'queued', ARGV[5], 'handed off', ARGV[4])
local reply = {redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[1] .. ':log', 0, -1)}
if KEYS[5] then
  local job = tail + 3 + tonumber(ARGV[tail + 2])
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
