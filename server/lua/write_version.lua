-- A Lua function, not a script: no keys and no arguments of its own.
-- Shared by append_version and remember: the version write. Both scripts' KEYS[1..3] and
-- ARGV[1..10] mean the same:
-- KEYS[1] record head hash
-- KEYS[2] the new version's hash key
-- KEYS[3] the current version's hash key (unused when the record is new)
-- ARGV[1] the current version the caller built on (0 for a new record)
-- ARGV[2] the new version's sha256      ARGV[3] its confidence
-- ARGV[4] its created_at                ARGV[5] its author
-- ARGV[6] the head hash the caller built on ("" for a new record)
-- ARGV[7] its prev_hash                 ARGV[8] its value (msgpack)
-- ARGV[9] its session ("" for none)     ARGV[10] its tags (msgpack)

-- nil when the head is the one the caller built on (the write may go ahead), else the
-- script's reply: {0, current_version, current_hash} (the caller rebuilds on that head and
-- retries) or {-1} when the record was forgotten (it takes no new versions).
local function refused_head()
  local head = redis.call('HMGET', KEYS[1], 'version', 'hash', 'forgotten_at')
  if head[3] then
    return {-1}
  end
  local current = tonumber(head[1] or '0')
  if current ~= tonumber(ARGV[1]) or (head[2] or '') ~= ARGV[6] then
    return {0, current, head[2] or ''}
  end
  return nil
end

-- Writes version ARGV[1] + 1 (refused_head first); returns its number.
local function write_version()
  local current = tonumber(ARGV[1])
  local new = current + 1
  if current > 0 then
    local confidence = redis.call('HGET', KEYS[1], 'confidence')
    redis.call('HSET', KEYS[3], 'superseded_by', new, 'confidence', confidence)
  end
  redis.call('HSET', KEYS[2], 'value', ARGV[8], 'author', ARGV[5], 'session', ARGV[9],
             'created_at', ARGV[4], 'tags', ARGV[10], 'version', new, 'hash', ARGV[2],
             'prev_hash', ARGV[7], 'confidence', ARGV[3])
  redis.call('HSET', KEYS[1], 'version', new, 'hash', ARGV[2], 'confidence', ARGV[3],
             'updated_at', ARGV[4], 'author', ARGV[5])
  return new
end
