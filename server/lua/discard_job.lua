-- KEYS[1] an RQ queue list   KEYS[2] the job's hash
-- ARGV[1] the job id
-- Removes a job that no worker has taken yet, and its hash (on the queue Redis). A job id is
-- in its queue at most once, and a resumed packet is the oldest, so its job sits near the
-- head: LREM with a count of 1 stops there instead of scanning the whole queue.
-- Returns 1 when the job was waiting and is gone, 0 when a worker already has it.

if redis.call('LREM', KEYS[1], 1, ARGV[1]) > 0 then
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
