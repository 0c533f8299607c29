-- KEYS[1] thread checkpoints   KEYS[2] thread entries   KEYS[3] thread writes
-- KEYS[4] thread write index
-- ARGV[1] ARGV[2] the ZREVRANGEBYLEX bounds (max, min)   ARGV[3] at most this many (-1: all)
-- Returns the checkpoints in the range, newest first, each as {member, entry, {writes}}:
-- one consistent view of each checkpoint with its pending writes.

local found = {}
local members = redis.call('ZREVRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, ARGV[3])
for _, member in ipairs(members) do
  local writes = {}
  local fields = redis.call('ZRANGEBYLEX', KEYS[4], '[' .. member .. '\0', '[' .. member .. '\0\255')
  for _, field in ipairs(fields) do
    local value = redis.call('HGET', KEYS[3], field)
    if value then
      writes[#writes + 1] = value
    end
  end
  local entry = redis.call('HGET', KEYS[2], member)
  if entry then
    found[#found + 1] = {member, entry, writes}
  end
end
return found
