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
-- Returns {1, id, packet fields, pins read} with pins read a list of read_pin replies
-- (empty unless ARGV[9] is set), {1, id, fields, pins read, error} when a follow-up failed
-- (the claim stands); {} when nothing is queued; {0, state} when the packet asked for is
-- not queued (claimed by someone else, settled, or just expired). The RQ job holding a
-- claim may claim again (its retry after the handler raised).
-- Queued packets whose expiry has passed are expired on the way instead of being claimed.
-- Runs after move.lua, discard.lua and follow_ups.lua (the loader puts them in front).
-- Every redis.call costs a script several µs beyond the command itself: the packet is read
-- once (HGETALL) and written once (one HSET), and the reply is built from what was read.

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

-- A hash's fields as HGETALL lists them ({field, value, field, value, ...}), by name.
local function by_name(listed)
  local fields = {}
  for i = 1, #listed, 2 do
    fields[listed[i]] = listed[i + 1]
  end
  return fields
end

-- listed (an HGETALL reply) with each field of changes ({field, value, ...}) set or added.
local function changed(listed, changes)
  local position = {}
  for i = 1, #listed, 2 do
    position[listed[i]] = i + 1
  end
  for i = 1, #changes, 2 do
    local at = position[changes[i]]
    if at then
      listed[at] = changes[i + 1]
    else
      listed[#listed + 1] = changes[i]
      listed[#listed + 1] = changes[i + 1]
    end
  end
  return listed
end

-- Of a pin's record and pinned version, what a resolved pin shows: {current version, value,
-- author, created_at, confidence}, the confidence the head's while the pinned version is
-- the current one; {} for an unknown record or version.
local function read_pin(record, version)
  local head = redis.call('HMGET', record .. ARGV[10], 'version', 'confidence')
  if not head[1] then
    return {}
  end
  local pinned = redis.call('HMGET', record .. ARGV[11] .. version,
                            'value', 'author', 'created_at', 'confidence')
  if not pinned[1] then
    return {}
  end
  if head[1] == version then
    pinned[4] = head[2]
  end
  return {head[1], pinned[1], pinned[2], pinned[3], pinned[4]}
end

-- The claim's answer, its follow-ups run. fields: the packet's, by name.
local function answer(id, listed, fields)
  local reply = {1, id, listed, {}}
  -- The follow-ups first: a pin that cannot be read fails the answer, not the event and
  -- the job's removal (the claim itself is written either way).
  local event_args = tonumber(ARGV[12])
  if event_args > 0 then
    local stream, job = ARGV[13 + event_args], 14 + event_args
    local marks = {['\0packet\0'] = id, ['\0job_seq\0'] = fields.job_seq or '0'}
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
    for i, pin in ipairs(cmsgpack.unpack(fields.pins)) do
      reply[4][i] = read_pin(ARGV[9] .. pin[1], tostring(pin[2]))
    end
  end
  return reply
end

-- Claim a packet no longer in the queued set: listed and fields are what it held.
local function claim(packet, id, listed, fields, reason)
  local changes = {'deliveries', tostring((tonumber(fields.deliveries) or 0) + 1),
                   'claimed_by', ARGV[6], 'lease_until', ARGV[5], 'job', ARGV[8]}
  redis.call('ZADD', KEYS[2], ARGV[4], id)
  move(packet, 'claimed', ARGV[6], reason, ARGV[3], fields.state or 'new', changes)
  changes[#changes + 1] = 'state'
  changes[#changes + 1] = 'claimed'
  changes[#changes + 1] = 'updated_at'
  changes[#changes + 1] = ARGV[3]
  return answer(id, changed(listed, changes), fields)
end

local now = tonumber(ARGV[2])
while true do
  local id = ARGV[1]
  if id == '' then
    local oldest = redis.call('ZPOPMIN', KEYS[1])
    if #oldest == 0 then
      return {}
    end
    id = oldest[1]
  elseif redis.call('ZREM', KEYS[1], id) == 0 then
    local held = KEYS[4] .. id
    local listed = redis.call('HGETALL', held)
    local fields = by_name(listed)
    if fields.state == 'claimed' and ARGV[8] ~= '' and fields.job == ARGV[8] then
      -- the same worker job, retried by RQ after its handler raised: renew its claim
      return claim(held, id, listed, fields, 'retry')
    end
    return {0, fields.state or ''}
  end
  local packet = KEYS[4] .. id
  local listed = redis.call('HGETALL', packet)
  local fields = by_name(listed)
  local expires = tonumber(fields.expires_us or '')
  if expires and expires <= now then
    redis.call('ZREM', KEYS[3], id)
    redis.call('ZADD', KEYS[5], now, id)
    move(packet, 'expired', '', 'expired before it was claimed', ARGV[3], fields.state)
    if ARGV[1] ~= '' then
      return {0, 'expired'}
    end
  else
    return claim(packet, id, listed, fields, ARGV[7])
  end
end
