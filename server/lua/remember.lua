-- KEYS[1] record head hash
-- KEYS[2] the new version's hash key
-- KEYS[3] the current version's hash key (unused when the record is new)
-- ARGV[1] the current version the caller built on (0 for a new record)
-- ARGV[2] the new version's sha256      ARGV[3] its confidence
-- ARGV[4] its created_at                ARGV[5] its author
-- ARGV[6] the head hash the caller built on ("" for a new record)
-- ARGV[7] what follows a write that won, packed for follow_ups.lua (one Redis), or ""
-- ARGV[8..] field/value pairs of the new version hash
-- Returns {1, new_version} on success, its follow-ups run ({1, new_version, error} if they
-- failed); {0, current_version, current_hash} when the head is not the one the caller built
-- on, by number or by hash (it rebuilds on that head and retries); {-1} when the record was
-- forgotten (it takes no new versions).

local head = redis.call('HMGET', KEYS[1], 'version', 'hash', 'forgotten_at')
if head[3] then
  return {-1}
end
local current = tonumber(head[1] or '0')
if current ~= tonumber(ARGV[1]) or (head[2] or '') ~= ARGV[6] then
  return {0, current, head[2] or ''}
end
local new = current + 1
if current > 0 then
  local confidence = redis.call('HGET', KEYS[1], 'confidence')
  redis.call('HSET', KEYS[3], 'superseded_by', new, 'confidence', confidence)
end
redis.call('HSET', KEYS[2], unpack(ARGV, 8))
redis.call('HSET', KEYS[1], 'version', new, 'hash', ARGV[2], 'confidence', ARGV[3],
           'updated_at', ARGV[4], 'author', ARGV[5])
if ARGV[7] ~= '' then
  -- The version is written whatever happens next: a failing follow-up costs its event or
  -- search document (as a crash between two round trips would), never the write.
  local shared = {index_doc = index_document, touch_session = touch_session}
  local failure = run_follow_ups(ARGV[7], shared)
  if failure then
    return {1, new, failure}
  end
end
return {1, new}
