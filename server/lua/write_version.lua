-- Lua functions, not a script: no keys and no arguments of their own.
-- Shared by append_version and remember: the version write. Both take a write's keys and
-- args as tables, meaning the same:
-- keys[1] record head hash
-- keys[2] the new version's hash key
-- keys[3] the current version's hash key (unused when the record is new)
-- args[1] the current version the caller built on (0 for a new record)
-- args[2] the new version's sha256      args[3] its confidence
-- args[4] its created_at                args[5] its author
-- args[6] the head hash the caller built on ("" for a new record)
-- args[7] its prev_hash                 args[8] its value (msgpack)
-- args[9] its session ("" for none)     args[10] its tags (msgpack)
-- args[11] the versions its writer saw of the record, comma-separated ("" for the version
--   it lands on: what a write that names none built on)

-- nil when the head is the one the caller built on (the write may go ahead), else the
-- refusal: {0, current_version, current_hash} (the caller rebuilds on that head and
-- retries), {-1} when the record was forgotten (it takes no new versions), or {3, the
-- current version's created_at} when the new version's is earlier (another process took
-- its time later but wrote first: the caller rebuilds with a later time, so a record's
-- versions are in the order of their times, which as_of relies on).
local function refused_head(keys, args)
  local head = redis.call('HMGET', keys[1], 'version', 'hash', 'forgotten_at', 'updated_at')
  if head[3] then
    return {-1}
  end
  local current = tonumber(head[1] or '0')
  if current ~= tonumber(args[1]) or (head[2] or '') ~= args[6] then
    return {0, current, head[2] or ''}
  end
  if head[4] and args[4] < head[4] then
    return {3, head[4]}
  end
  return nil
end

-- A record is contested while versions written without seeing each other stand: its head's
-- 'contested' names them (comma-separated) and 'contested_base' the newest version they
-- all saw. A write that did not see the version it lands on contests that version; on a
-- contested record each write takes the place of the contested versions it saw, and the
-- contest is settled when none of the others is left.
local function contest(head_key, current, new, seen_list)
  if seen_list == '' then
    seen_list = tostring(current)
  end
  local seen, newest = {}, -1
  for number in string.gmatch(seen_list, '%d+') do
    number = tonumber(number)
    seen[number] = true
    newest = math.max(newest, number)
  end
  local contested = redis.call('HGET', head_key, 'contested')
  if not contested then
    if newest < current then
      redis.call('HSET', head_key, 'contested', current .. ',' .. new, 'contested_base', newest)
    end
    return
  end
  local left = {}
  for number in string.gmatch(contested, '%d+') do
    if not seen[tonumber(number)] then
      left[#left + 1] = number
    end
  end
  if #left == 0 then
    redis.call('HDEL', head_key, 'contested', 'contested_base')
  else
    left[#left + 1] = new
    local base = tonumber(redis.call('HGET', head_key, 'contested_base'))
    redis.call('HSET', head_key, 'contested', table.concat(left, ','),
               'contested_base', math.min(base, newest))
  end
end

-- Writes version args[1] + 1 (refused_head first); returns its number and the record's
-- contest after it: {contested, contested_base}, both false when it has none.
local function write_version(keys, args)
  local current = tonumber(args[1])
  local new = current + 1
  contest(keys[1], current, new, args[11])
  if current > 0 then
    local confidence = redis.call('HGET', keys[1], 'confidence')
    redis.call('HSET', keys[3], 'superseded_by', new, 'confidence', confidence)
  end
  redis.call('HSET', keys[2], 'value', args[8], 'author', args[5], 'session', args[9],
             'created_at', args[4], 'tags', args[10], 'version', new, 'hash', args[2],
             'prev_hash', args[7], 'confidence', args[3])
  redis.call('HSET', keys[1], 'version', new, 'hash', args[2], 'confidence', args[3],
             'updated_at', args[4], 'author', args[5])
  return new, redis.call('HMGET', keys[1], 'contested', 'contested_base')
end
