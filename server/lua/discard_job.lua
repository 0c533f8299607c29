-- KEYS[1] an RQ queue list   KEYS[2] the job's hash
-- ARGV[1] the job id
-- Removes a job that no worker has taken yet, and its hash, on the queue Redis (discard.lua).
-- Returns 1 when the job was waiting and is gone, 0 when a worker already has it.

return discard_job(KEYS, ARGV)
