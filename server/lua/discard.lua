-- A Lua function, not a script: no keys and no arguments of its own.
-- Shared by discard_job and claim_packet (a pull drops its packet's job). keys: an RQ queue
-- list, the job's hash; args: the job id. Removes a job that no worker has taken yet, and
-- its hash. A job id is in its queue at most once, and a resumed packet is the oldest, so its
-- job sits near the head: LREM with a count of 1 stops there instead of scanning the queue.
-- Returns 1 when the job was waiting and is gone, 0 when a worker already has it.

local function discard_job(keys, args)
  if redis.call('LREM', keys[1], 1, args[1]) > 0 then
    redis.call('DEL', keys[2])
    return 1
  end
  return 0
end
