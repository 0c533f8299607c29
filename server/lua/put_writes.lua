-- KEYS[1] thread writes   KEYS[2] thread write index
-- ARGV triples: a write's field (member NUL task NUL index), its value (msgpack), and '1'
--               when it replaces one stored under the same field ('0': kept if stored)
-- Stores a task's pending writes for one checkpoint: a regular write stays as first stored
-- (a task run again writes the same), a special one (error, interrupt, resume) is replaced.
-- Returns how many were stored.

local stored = 0
for i = 1, #ARGV, 3 do
  local field, value = ARGV[i], ARGV[i + 1]
  local written
  if ARGV[i + 2] == '1' then
    redis.call('HSET', KEYS[1], field, value)
    written = 1
  else
    written = redis.call('HSETNX', KEYS[1], field, value)
  end
  if written == 1 then
    redis.call('ZADD', KEYS[2], 0, field)
    stored = stored + 1
  end
end
return stored
