-- Writes on one Redis: one or more versions, each with its listing entries and what follows
-- it, then the commands that complete the change (a saved memory's links and audit entry),
-- all in one step: every head and search document is checked before anything is written.
--
-- ARGV[1] how many writes (W)   ARGV[2..1+W] how many KEYS each takes
-- ARGV[2+W..1+2W] how many ARGV each takes, then each write's ARGV, in order
-- then the commands: each as its argument count (N), its name, its N - 1 arguments; its key
--   is the next of KEYS after the writes' (the commands' keys, in order)
--
-- One write's keys and args (k, a):
-- k[1..3] and a[1..11]: see write_version.lua (the head, the new and current versions;
--   what the version holds, the head it was built on and the versions its writer saw; for
--   a[11] "session": the version the session last saw, if any)
-- k[4] the namespace's refs   k[5] its agents   k[6] its events stream
-- k[7..11] the search index: docs hash, meta hash, stats hash (which also counts the
--   namespace's stored value bytes, 'bytes'), vectors hash, changes stream
-- k[12..11+T] each tag's set (T tags), then with a session (a[9]): its hash, its touched
--   hash, the sessions, the active sessions, the set of namespaces and its log of sightings
-- k[after those] the postings the search document's index call names (index.lua)
-- a[12] the ref   a[13] how many tags (T)   a[14] the namespace   a[15] now (µs)
-- a[16] how many XADD arguments the event has (E), a[17..16+E] those arguments, from MAXLEN
--   on (activity.event_args)
-- a[17+E] the search document ("" when the ref is not indexed), then what index_document
--   takes after it: entry, meta, length, vector, term count, term / count pairs, the
--   further postings' terms
--
-- Returns {1, {new_version, ...}, {contest, ...}} when everything was written, its
-- follow-ups run ({1, versions, contests, error} if one failed), each contest the record's
-- after its write as write_version returns it; or, writing nothing, the first refusal, with the
-- number of the write refused (I): {0, I, current_version, current_hash} when its head is
-- not the one the caller built on, by number or by hash (it rebuilds on that head and
-- retries); {-1, I} when its record was forgotten (it takes no new versions); {2, I, term,
-- ...} when its document was indexed with terms whose postings were not given (the caller
-- gives them, retries).
-- Runs after write_version.lua, index.lua, touch.lua and follow_ups.lua (the loader puts
-- them in front).

-- Where one write's parts are in its args and keys.
local function layout(k, a)
  local tags, session = tonumber(a[13]), a[9]
  local s = 12 + tags  -- the session's keys
  local postings = s
  if session ~= '' then
    postings = s + 6
  end
  local document = 17 + tonumber(a[16])
  local index_keys = {k[7], k[8], k[9], k[10], k[11]}
  for i = postings, #k do
    index_keys[#index_keys + 1] = k[i]
  end
  return tags, session, s, document, index_keys, slice(a, document, #a)
end

-- nil when the write may go ahead, else its refusal (without its number).
local function refused(k, a)
  local head = refused_head(k, a)
  if head then
    return head
  end
  local _, _, _, document, index_keys, index_args = layout(k, a)
  if a[document] ~= '' then
    return refused_postings(index_keys, index_args, 2)
  end
  return nil
end

-- Writes one version (checked already); its number, a follow-up's failure if one failed,
-- and the record's contest. The version is written whatever happens next: a failing follow-up costs its
-- event, session touch or search document (as a crash between two round trips would),
-- never the write.
local function write(k, a)
  local tags, session, s, document, index_keys, index_args = layout(k, a)
  local ref = a[12]
  -- Index first: listing finds every record written.
  redis.call('ZADD', k[4], 0, ref)
  redis.call('SADD', k[5], a[5])
  for i = 12, 11 + tags do
    redis.call('SADD', k[i], ref)
  end
  if a[11] == 'session' then
    a[11] = (session ~= '' and redis.call('HGET', k[s + 1], ref)) or ''
  end
  local new, contest = write_version(k, a)
  redis.call('HINCRBY', k[9], 'bytes', #a[8])

  local function session_touch()
    touch_session({k[s], k[s + 1], k[s + 5]}, {a[5], a[4], ref, new})
  end
  local function session_listing()  -- in the lists, and its namespace swept
    redis.call('ZADD', k[s + 2], 'NX', a[15], session)
    redis.call('ZADD', k[s + 3], a[15], session)
    redis.call('SADD', k[s + 4], a[14])
  end
  local function event()  -- its fields, then the version it announces
    local fields = slice(a, 17, document - 1)
    fields[#fields + 1] = 'version'
    fields[#fields + 1] = new
    redis.call('XADD', k[6], unpack(fields))
  end
  local function search_document()
    index_document(index_keys, index_args)
  end
  local follow_ups = {event}
  if session ~= '' then
    follow_ups = {session_touch, session_listing, event}
  end
  if a[document] ~= '' then
    follow_ups[#follow_ups + 1] = search_document
  end
  return new, run_follow_ups(follow_ups), contest
end

local count = tonumber(ARGV[1])
local writes = {}
local key, arg = 1, 2 + 2 * count
for i = 1, count do
  local keys, args = tonumber(ARGV[1 + i]), tonumber(ARGV[1 + count + i])
  writes[i] = {slice(KEYS, key, key + keys - 1), slice(ARGV, arg, arg + args - 1)}
  key, arg = key + keys, arg + args
end

for i, each in ipairs(writes) do
  local refusal = refused(each[1], each[2])
  if refusal then
    table.insert(refusal, 2, i)
    return refusal
  end
end
local versions, contests, failure = {}, {}, nil
for i, each in ipairs(writes) do
  local new, failed, contest = write(each[1], each[2])
  versions[i], contests[i] = new, contest
  failure = failure or failed
end
run_commands(key, arg)
if failure then
  return {1, versions, contests, failure}
end
return {1, versions, contests}
