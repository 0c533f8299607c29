-- KEYS[1] record head hash
-- KEYS[2] the new version's hash key
-- KEYS[3] the current version's hash key (unused when the record is new)
-- ARGV[1] the current version the caller built on (0 for a new record)
-- ARGV[2] the new version's sha256      ARGV[3] its confidence
-- ARGV[4] its created_at                ARGV[5] its author
-- ARGV[6] the head hash the caller built on ("" for a new record)
-- ARGV[7] its prev_hash                 ARGV[8] its value (msgpack)
-- ARGV[9] its session ("" for none)     ARGV[10] its tags (msgpack)
--
-- On one Redis, what follows a write that won comes in the same call (a cluster sends it in
-- a round trip of its own: these keys are in other slots). Absent on a cluster:
-- KEYS[4] the namespace's refs   KEYS[5] its agents   KEYS[6] its events stream
-- KEYS[7..10] the search index: docs hash, meta hash, stats hash, term postings' prefix
-- KEYS[11..] each tag's set, then with a session: its hash, its touched hash, the sessions,
--   the active sessions and the set of namespaces
-- ARGV[11] the ref   ARGV[12] how many tags   ARGV[13] the namespace   ARGV[14] now in µs
-- ARGV[15] how many XADD arguments the event has (E), ARGV[16..15+E] those arguments, from
--   MAXLEN on (activity.event_args)
-- ARGV[16+E] the search document ("" when the ref is not indexed), then what index_document
--   takes after it: entry, meta, length, term / posting score pairs
--
-- Returns {1, new_version} on success, its follow-ups run ({1, new_version, error} if one
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
local ref = ARGV[11]
local tags = tonumber(ARGV[12] or '0')
if ref then
  -- Index first, as a cluster does before the script: listing finds every record written.
  redis.call('ZADD', KEYS[4], 0, ref)
  redis.call('SADD', KEYS[5], ARGV[5])
  for i = 11, 10 + tags do
    redis.call('SADD', KEYS[i], ref)
  end
end
if current > 0 then
  local confidence = redis.call('HGET', KEYS[1], 'confidence')
  redis.call('HSET', KEYS[3], 'superseded_by', new, 'confidence', confidence)
end
redis.call('HSET', KEYS[2], 'value', ARGV[8], 'author', ARGV[5], 'session', ARGV[9],
           'created_at', ARGV[4], 'tags', ARGV[10], 'version', new, 'hash', ARGV[2],
           'prev_hash', ARGV[7], 'confidence', ARGV[3])
redis.call('HSET', KEYS[1], 'version', new, 'hash', ARGV[2], 'confidence', ARGV[3],
           'updated_at', ARGV[4], 'author', ARGV[5])
if not ref then
  return {1, new}
end

-- The version is written whatever happens next: a failing follow-up costs its event,
-- session touch or search document (as a crash between two round trips would), never the
-- write.
local s = 11 + tags  -- the session's keys
local function session_touch()
  touch_session({KEYS[s], KEYS[s + 1]}, {ARGV[5], ARGV[4], ref, new})
end
local function session_listing()  -- in the lists, and its namespace swept
  redis.call('ZADD', KEYS[s + 2], 'NX', ARGV[14], ARGV[9])
  redis.call('ZADD', KEYS[s + 3], ARGV[14], ARGV[9])
  redis.call('SADD', KEYS[s + 4], ARGV[13])
end
local document = 16 + tonumber(ARGV[15])
local function event()
  redis.call('XADD', KEYS[6], unpack(ARGV, 16, document - 1))
end
local function search_document()
  index_document({KEYS[7], KEYS[8], KEYS[9], KEYS[10]}, slice(ARGV, document, #ARGV))
end

local follow_ups = {event}
if ARGV[9] ~= '' then
  follow_ups = {session_touch, session_listing, event}
end
if ARGV[document] ~= '' then
  follow_ups[#follow_ups + 1] = search_document
end
local failure = run_follow_ups(follow_ups)
if failure then
  return {1, new, failure}
end
return {1, new}
