-- KEYS[1] inbox queued  KEYS[2] inbox claimed  KEYS[3] inbox expiring  KEYS[4] inbox expired
-- KEYS[5] packet hash   KEYS[6] packet log
-- ARGV[1] packet id
-- ARGV[2] now (µs)      ARGV[3] now (ISO)      ARGV[4] lease end (µs)  ARGV[5] lease end (ISO)
-- ARGV[6] claimant      ARGV[7] reason     ARGV[8] the claiming RQ job's id, "" for a pull
-- Returns {1, packet fields} (as HGETALL lists them, the claim's changes in) when claimed;
-- {0, state} when the packet is not queued: claimed by someone else, settled, unknown ("")
-- or past its expiry ("expired": it is expired on the way instead of being claimed). The RQ
-- job holding a claim may claim again (its retry after the handler raised).
-- Runs after move.lua (the loader puts it in front).
-- Every redis.call costs a script several µs beyond the command itself: the packet is read
-- once (HGETALL) and written once (one HSET), and the reply is built from what was read.

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

-- Claim the packet (no longer in the queued set): listed and fields are what it held.
local function claim(listed, fields, reason)
  local changes = {'deliveries', tostring((tonumber(fields.deliveries) or 0) + 1),
                   'claimed_by', ARGV[6], 'lease_until', ARGV[5], 'job', ARGV[8]}
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
  move(KEYS[5], KEYS[6], 'claimed', ARGV[6], reason, ARGV[3], fields.state or 'new', changes)
  changes[#changes + 1] = 'state'
  changes[#changes + 1] = 'claimed'
  changes[#changes + 1] = 'updated_at'
  changes[#changes + 1] = ARGV[3]
  return {1, changed(listed, changes)}
end

local listed = redis.call('HGETALL', KEYS[5])
local fields = by_name(listed)
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  if fields.state == 'claimed' and ARGV[8] ~= '' and fields.job == ARGV[8] then
    -- the same worker job, retried by RQ after its handler raised: renew its claim
    return claim(listed, fields, 'retry')
  end
  return {0, fields.state or ''}
end
local expires = tonumber(fields.expires_us or '')
if expires and expires <= tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
  move(KEYS[5], KEYS[6], 'expired', '', 'expired before it was claimed', ARGV[3], fields.state)
  return {0, 'expired'}
end
return claim(listed, fields, ARGV[7])
