-- KEYS[1] thread checkpoints   KEYS[2] thread entries   KEYS[3] thread writes
-- KEYS[4] thread write index   KEYS[5] thread runs      KEYS[6] thread deltas
-- ARGV[1] what to drop: 'all' (the thread), 'runs' (the checkpoints of the runs ARGV[2..])
--         or 'all_but_latest' (each checkpoint namespace keeps its newest)
-- Drops checkpoints with their pending writes. Returns {how many were dropped, then each run
-- id that no longer has a checkpoint in the thread}; {-1} (nothing dropped) for
-- 'all_but_latest' on a thread with a DeltaChannel, whose value lives in the writes of the
-- checkpoints it would drop.

local function runs_left()
  local runs = {}
  for _, member in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    runs[string.sub(member, 1, string.find(member, '\0', 1, true) - 1)] = true
  end
  return runs
end

local function drop(member)
  redis.call('ZREM', KEYS[1], member)
  redis.call('ZREM', KEYS[6], member)
  redis.call('HDEL', KEYS[2], member)
  local low, high = '[' .. member .. '\0', '[' .. member .. '\0\255'
  for _, field in ipairs(redis.call('ZRANGEBYLEX', KEYS[4], low, high)) do
    redis.call('HDEL', KEYS[3], field)
  end
  redis.call('ZREMRANGEBYLEX', KEYS[4], low, high)
end

if ARGV[1] == 'all_but_latest' and redis.call('ZCARD', KEYS[6]) > 0 then
  return {-1}
end
local before = runs_left()
local dropped = 0
if ARGV[1] == 'all' then
  dropped = redis.call('ZCARD', KEYS[1])
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
elseif ARGV[1] == 'runs' then
  for i = 2, #ARGV do
    local low, high = '[' .. ARGV[i] .. '\0', '[' .. ARGV[i] .. '\0\255'
    for _, run_member in ipairs(redis.call('ZRANGEBYLEX', KEYS[5], low, high)) do
      local member = string.sub(run_member, #ARGV[i] + 2)
      if redis.call('ZSCORE', KEYS[1], member) then
        drop(member)
        dropped = dropped + 1
      end
    end
    redis.call('ZREMRANGEBYLEX', KEYS[5], low, high)
  end
else
  local members = redis.call('ZRANGE', KEYS[1], 0, -1)
  for i, member in ipairs(members) do
    local following = members[i + 1]
    local namespace = string.sub(member, 1, string.find(member, '\0', 1, true))
    if following and string.sub(following, 1, #namespace) == namespace then
      drop(member)
      dropped = dropped + 1
    end
  end
  for _, run_member in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    local member = string.sub(run_member, string.find(run_member, '\0', 1, true) + 1)
    if not redis.call('ZSCORE', KEYS[1], member) then
      redis.call('ZREM', KEYS[5], run_member)
    end
  end
end

local gone = {dropped}
local after = runs_left()
for run in pairs(before) do
  if not after[run] then
    gone[#gone + 1] = run
  end
end
return gone
