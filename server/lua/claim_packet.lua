-- KEYS[1] inbox queued  KEYS[2] inbox claimed  KEYS[3] inbox expiring  KEYS[4] packet prefix
-- KEYS[5] inbox expired
-- ARGV[1] packet id, or "" for the oldest queued one
-- ARGV[2] now (µs)      ARGV[3] now (ISO)      ARGV[4] lease end (µs)  ARGV[5] lease end (ISO)
-- ARGV[6] claimant      ARGV[7] reason     ARGV[8] the claiming RQ job's id, "" for a pull
-- ARGV[9] ARGV[10] ARGV[11] on one Redis: how a record's keys are spelled around its ref
--         (prefix, head suffix, versions suffix), to read the claimed packet's pins here;
--         "" "" "" on a cluster, where records live in other slots
-- On one Redis, what follows a claim comes too (0 in ARGV[12] on a cluster). Its keys are
-- not declared (the job's is known only once the packet is): one Redis only. The marks
-- \0packet\0 and \0job_seq\0 in them stand for the claimed packet's id and job_seq.
-- ARGV[12] how many XADD arguments the claim's event has (E), ARGV[13..12+E] those
--          arguments from MAXLEN on (activity.event_args), ARGV[13+E] the events stream
-- ARGV[14+E] ARGV[15+E] ARGV[16+E] for a pull whose RQ job is on this Redis: the job's
--          queue, its hash and its id, to drop it (discard.lua); else "" "" ""
-- Returns {1, id, packet fields, pins read} with pins read a list of read_record replies
-- (empty unless ARGV[9] is set), {1, id, fields, pins read, error} when a follow-up failed
-- (the claim stands); {} when nothing is queued; {0, state} when the packet asked for is
-- not queued (claimed by someone else, settled, or just expired). The RQ job holding a
-- claim may claim again (its retry after the handler raised).
-- Queued packets whose expiry has passed are expired on the way instead of being claimed.
-- Runs after move.lua, read.lua, discard.lua and follow_ups.lua (the loader puts them in
-- front).

local function mark_replaced(text, marks)
  if not string.find(text, '\0', 1, true) then
    return text  -- every mark starts with a NUL byte: most arguments have none
  end
  for mark, value in pairs(marks) do
    local first, last = string.find(text, mark, 1, true)
    while first do
      text = string.sub(text, 1, first - 1) .. value .. string.sub(text, last + 1)
      first, last = string.find(text, mark, first + #value, true)
    end
  end
  return text
end

-- ARGV[first..last], each mark replaced by its value.
local function marked(first, last, marks)
  local args = {}
  for i = first, last do
    args[#args + 1] = mark_replaced(ARGV[i], marks)
  end
  return args
end

local function claimed(packet, id)
  local reply = {1, id, redis.call('HGETALL', packet), {}}
  -- The follow-ups first: a pin that cannot be read fails the answer, not the event and
  -- the job's removal (the claim itself is written either way).
  local event_args = tonumber(ARGV[12])
  if event_args > 0 then
    local stream, job = ARGV[13 + event_args], 14 + event_args
    local marks = {['\0packet\0'] = id,
                   ['\0job_seq\0'] = redis.call('HGET', packet, 'job_seq') or '0'}
    local follow_ups = {function()
      redis.call('XADD', stream, unpack(marked(13, 12 + event_args, marks)))
    end}
    if ARGV[job] ~= '' then
      follow_ups[2] = function()
        local drop = marked(job, job + 2, marks)
        discard_job({drop[1], drop[2]}, {drop[3]})
      end
    end
    reply[5] = run_follow_ups(follow_ups)
  end
  if ARGV[9] ~= '' then
    for i, pin in ipairs(cmsgpack.unpack(redis.call('HGET', packet, 'pins'))) do
      local record = ARGV[9] .. pin[1]
      reply[4][i] = read_record(record .. ARGV[10], record .. ARGV[11], tostring(pin[2]))
    end
  end
  return reply
end

local now = tonumber(ARGV[2])
while true do
  local id = ARGV[1]
  if id == '' then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0)
    if #first == 0 then
      return {}
    end
    id = first[1]
  elseif not redis.call('ZSCORE', KEYS[1], id) then
    local held = KEYS[4] .. id
    local state = redis.call('HGET', held, 'state') or ''
    if state == 'claimed' and ARGV[8] ~= '' and redis.call('HGET', held, 'job') == ARGV[8] then
      -- the same worker job, retried by RQ after its handler raised: renew its claim
      redis.call('ZADD', KEYS[2], ARGV[4], id)
      redis.call('HINCRBY', held, 'deliveries', 1)
      redis.call('HSET', held, 'lease_until', ARGV[5])
      move(held, 'claimed', ARGV[6], 'retry', ARGV[3])
      return claimed(held, id)
    end
    return {0, state}
  end
  local packet = KEYS[4] .. id
  redis.call('ZREM', KEYS[1], id)
  local expires = tonumber(redis.call('HGET', packet, 'expires_us') or '')
  if expires and expires <= now then
    redis.call('ZREM', KEYS[3], id)
    redis.call('ZADD', KEYS[5], now, id)
    move(packet, 'expired', '', 'expired before it was claimed', ARGV[3])
    if ARGV[1] ~= '' then
      return {0, 'expired'}
    end
  else
    redis.call('ZADD', KEYS[2], ARGV[4], id)
    redis.call('HINCRBY', packet, 'deliveries', 1)
    redis.call('HSET', packet, 'claimed_by', ARGV[6], 'lease_until', ARGV[5], 'job', ARGV[8])
    move(packet, 'claimed', ARGV[6], ARGV[7], ARGV[3])
    return claimed(packet, id)
  end
end
