-- KEYS[1] thread checkpoints   KEYS[2] thread entries   KEYS[3] thread writes
-- KEYS[4] thread write index   KEYS[5] thread runs      KEYS[6] thread deltas
-- ARGV[1] how many checkpoints follow (n); then n times: member (namespace NUL id), its
--         entry (msgpack), its run member ('' for none), '1' when its metadata counts a
--         DeltaChannel's updates; then to the end: pairs of a write's field (member NUL task
--         NUL index) and value (msgpack)
-- Stores LangGraph checkpoints with their writes (a put stores one, a copy a whole thread);
-- an entry or write of the same member or field is replaced. Returns n.

local n = tonumber(ARGV[1])
for i = 0, n - 1 do
  local member, entry, run = ARGV[2 + 4 * i], ARGV[3 + 4 * i], ARGV[4 + 4 * i]
  redis.call('ZADD', KEYS[1], 0, member)
  redis.call('HSET', KEYS[2], member, entry)
  if run ~= '' then
    redis.call('ZADD', KEYS[5], 0, run)
  end
  if ARGV[5 + 4 * i] == '1' then
    redis.call('ZADD', KEYS[6], 0, member)
  end
end
for i = 2 + 4 * n, #ARGV, 2 do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[4], 0, ARGV[i])
end
return n
