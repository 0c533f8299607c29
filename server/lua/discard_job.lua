-- KEYS[1] an RQ queue (list)   KEYS[2] the job's hash
-- ARGV[1] the job id
-- Removes a job that no worker has taken yet (a packet pulled by resume: its job would only
-- find it claimed), and its hash, so queue depths stay true; a job a worker has taken is
-- left to run. A job id is in its queue at most once, and a resumed packet is the oldest,
-- so its job sits near the head: LREM with a count of 1 stops there.
-- Returns 1 when the job was waiting and is gone, 0 when a worker already has it.

if redis.call('LREM', KEYS[1], 1, ARGV[1]) > 0 then
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
