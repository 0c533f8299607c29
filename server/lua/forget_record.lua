-- KEYS[1] record head hash   KEYS[2..n+1] the hashes of versions 1..n
-- ARGV[1] the version the caller built on (n)   ARGV[2] forgotten at   ARGV[3] by
-- ARGV[4] reason   ARGV[5] the empty value (msgpack nil)
-- ARGV[6..n+5] tombstone hash of versions 1..n
-- On one Redis only, the rest of the change in the same step:
-- KEYS[n+2..n+6] the search index's docs, meta and stats hashes, vectors hash and changes
--   stream (the bytes freed are taken off the stats' count of stored value bytes here; on a
--   cluster the caller does, after), then the postings the document's removal names
--   (index.lua), then one key for each command
-- ARGV[n+6] how many arguments the removal of the record's search document takes (R, 0 for
--   none), ARGV[n+7..n+6+R] those (index.lua's, with an empty entry), then the commands:
--   each as its argument count (N), its name, its N - 1 arguments (its key is the next of
--   KEYS)
-- Replaces every version's value by a tombstone (and drops the token it counted against,
-- whose bytes the caller gives back); hashes and links stay, so the chain still verifies. Returns {1, the value bytes freed, {each command's reply}}; or, writing
-- nothing, {0} when the record moved on or was forgotten meanwhile (the caller reads it
-- again), {2, term, ...} when the removal did not name every posting of the document (the
-- caller gives them, retries).
-- Runs after index.lua (the loader puts it in front).

local n = tonumber(ARGV[1])
local head = redis.call('HMGET', KEYS[1], 'version', 'forgotten_at')
if tonumber(head[1] or '0') ~= n or head[2] then
  return {0}
end
local whole = #KEYS > n + 1  -- one Redis: the whole change
local index_keys, removal, key, arg = {}, {}, n + 7, n + 7
if whole then
  local count = tonumber(ARGV[n + 6])
  removal = slice(ARGV, n + 7, n + 6 + count)
  index_keys = slice(KEYS, n + 2, n + 6)
  if count > 0 then
    for i = 1, count - 6 do  -- the postings: one for each term after the six fields
      index_keys[#index_keys + 1] = KEYS[n + 6 + i]
    end
    local refused = refused_postings(index_keys, removal, 2)
    if refused then
      return refused
    end
  end
  key, arg = n + 7 + math.max(count - 6, 0), n + 7 + count
end

local freed = 0
for i = 2, n + 1 do
  freed = freed + redis.call('HSTRLEN', KEYS[i], 'value') - #ARGV[5]
  redis.call('HSET', KEYS[i], 'value', ARGV[5], 'tombstone_hash', ARGV[i + 4],
             'forgotten_at', ARGV[2], 'forgotten_by', ARGV[3], 'forgotten_reason', ARGV[4])
  redis.call('HDEL', KEYS[i], 'token')  -- its bytes go back to the token (the caller's)
end
redis.call('HSET', KEYS[1], 'forgotten_at', ARGV[2])
local replies = {}
if whole then
  redis.call('HINCRBY', KEYS[n + 4], 'bytes', -freed)
  if #removal > 0 then
    index_document(index_keys, removal)
  end
  replies = run_commands(key, arg)
end
return {1, freed, replies}
