-- KEYS[1..3] and ARGV[1..10]: see write_version.lua (the head, the new and current
-- versions; what the version holds and the head it was built on).
-- A whole write on one Redis: the listing entries, the version, and what follows it.
-- KEYS[4] the namespace's refs   KEYS[5] its agents   KEYS[6] its events stream
-- KEYS[7..11] the search index: docs hash, meta hash, stats hash (which also counts the
--   namespace's stored value bytes, 'bytes'), vectors hash, changes stream
-- KEYS[12..11+T] each tag's set (T tags), then with a session (ARGV[9]): its hash, its
--   touched hash, the sessions, the active sessions and the set of namespaces
-- KEYS[after those] the postings the search document's index call names (index.lua)
-- ARGV[11] the ref   ARGV[12] how many tags (T)   ARGV[13] the namespace   ARGV[14] now (µs)
-- ARGV[15] how many XADD arguments the event has (E), ARGV[16..15+E] those arguments, from
--   MAXLEN on (activity.event_args)
-- ARGV[16+E] the search document ("" when the ref is not indexed), then what
--   index_document takes after it: entry, meta, length, vector, term count, term / count
--   pairs, the further postings' terms
--
-- Returns {1, new_version} on success, its follow-ups run ({1, new_version, error} if one
-- failed); {0, current_version, current_hash} when the head is not the one the caller built
-- on, by number or by hash (it rebuilds on that head and retries); {-1} when the record was
-- forgotten (it takes no new versions); {2, term, ...}, writing nothing, when the document
-- was indexed with terms whose postings were not given (the caller gives them, retries).
-- Runs after write_version.lua, index.lua, touch.lua and follow_ups.lua (the loader puts
-- them in front).

local refused = refused_head()
if refused then
  return refused
end
local ref, tags, session = ARGV[11], tonumber(ARGV[12]), ARGV[9]
local s = 12 + tags  -- the session's keys
local postings = s
if session ~= '' then
  postings = s + 5
end
local document = 16 + tonumber(ARGV[15])
local index_keys = {KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]}
for i = postings, #KEYS do  -- (unpack stops at Lua's stack limit: a document can have more)
  index_keys[#index_keys + 1] = KEYS[i]
end
local index_args = slice(ARGV, document, #ARGV)
if ARGV[document] ~= '' then
  local missing = missing_postings(index_keys, index_args)
  if missing then
    table.insert(missing, 1, 2)
    return missing
  end
end

-- Index first: listing finds every record written.
redis.call('ZADD', KEYS[4], 0, ref)
redis.call('SADD', KEYS[5], ARGV[5])
for i = 12, 11 + tags do
  redis.call('SADD', KEYS[i], ref)
end
local new = write_version()
redis.call('HINCRBY', KEYS[9], 'bytes', #ARGV[8])

-- The version is written whatever happens next: a failing follow-up costs its event,
-- session touch or search document (as a crash between two round trips would), never the
-- write.
local function session_touch()
  touch_session({KEYS[s], KEYS[s + 1]}, {ARGV[5], ARGV[4], ref, new})
end
local function session_listing()  -- in the lists, and its namespace swept
  redis.call('ZADD', KEYS[s + 2], 'NX', ARGV[14], session)
  redis.call('ZADD', KEYS[s + 3], ARGV[14], session)
  redis.call('SADD', KEYS[s + 4], ARGV[13])
end
local function event()
  redis.call('XADD', KEYS[6], unpack(ARGV, 16, document - 1))
end
local function search_document()
  index_document(index_keys, index_args)
end

local follow_ups = {event}
if session ~= '' then
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
