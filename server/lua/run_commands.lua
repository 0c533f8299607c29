-- KEYS[1] (optional) the packet the commands are the job of: nothing runs unless it exists
-- No other keys declared: the commands name their own keys, so this runs on a single Redis
-- only (RQ's queue Redis, which is never a cluster).
-- ARGV[1] a msgpack list of commands, each a list: the command's name and its arguments
-- Runs the commands in order, with nothing else in between (RQ's enqueue, as its MULTI would).
-- Returns how many commands ran, or -1 when the packet named does not exist (yet).

if KEYS[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local commands = cmsgpack.unpack(ARGV[1])
for _, command in ipairs(commands) do
  redis.call(unpack(command))
end
return #commands
