-- No keys declared: the commands name their own keys (commands.lua), on RQ's queue Redis.
-- ARGV[1] a msgpack list of commands, each a list: the command's name and its arguments
-- Runs the commands in order, with nothing else in between (RQ's enqueue, as its MULTI would).
-- Returns how many commands ran.

return run_commands(ARGV[1])
