-- A Lua function, not a script: no keys and no arguments of its own.
-- Shared by run_commands and create_packet: runs a msgpack list of commands (each a list: the
-- command's name and its arguments, RQ's own for a job) in order, with nothing else in
-- between (as RQ's MULTI would). Their keys are not declared: one Redis only (RQ's queue
-- Redis, which is never a cluster). Returns how many commands ran.

local function run_commands(packed)
  local commands = cmsgpack.unpack(packed)
  for _, command in ipairs(commands) do
    redis.call(unpack(command))
  end
  return #commands
end
