-- KEYS[1] thread checkpoints   KEYS[2] thread entries   KEYS[3] thread writes
-- KEYS[4] thread write index
-- ARGV[1] 'range': ARGV[2] ARGV[3] the ZREVRANGEBYLEX bounds (max, min), ARGV[4] at most this
--         many (-1: all); 'members': ARGV[2..] the members to read, in order
-- Returns the checkpoints read (a range newest first), each as {member, entry, {writes}}:
-- one consistent view of each checkpoint with its pending writes; a member no longer
-- stored is left out.

local members = {}
if ARGV[1] == 'range' then
  members = redis.call('ZREVRANGEBYLEX', KEYS[1], ARGV[2], ARGV[3], 'LIMIT', 0, ARGV[4])
else
  for i = 2, #ARGV do
    members[#members + 1] = ARGV[i]
  end
end
local found = {}
for _, member in ipairs(members) do
  local entry = redis.call('HGET', KEYS[2], member)
  if entry then
    local writes = {}
    local low, high = '[' .. member .. '\0', '[' .. member .. '\0\255'
    for _, field in ipairs(redis.call('ZRANGEBYLEX', KEYS[4], low, high)) do
      local value = redis.call('HGET', KEYS[3], field)
      if value then
        writes[#writes + 1] = value
      end
    end
    found[#found + 1] = {member, entry, writes}
  end
end
return found
