-- A Lua function, not a script: no keys and no arguments of its own.
-- Shared by index_doc and remember: (re)index one document. keys: docs hash, meta hash,
-- stats hash, the term postings' prefix; args: doc id, its entry (msgpack {kind, project,
-- agent, len, terms}, or "" to only remove it), its meta ("kind\tproject\tagent"), its
-- length, then term / posting score pairs.
-- A document indexed again keeps its entry's place and only moves what changed: its old
-- terms that are gone lose their posting, every new term's posting is set (ZADD replaces a
-- kept term's score), and the totals move by the difference.
-- Returns 1 if the doc was indexed before, else 0.

local function index_document(keys, args)
  local old = redis.call('HGET', keys[1], args[1])
  local adding = args[2] ~= ''
  if old then
    local entry = cmsgpack.unpack(old)
    local kept = {}
    if adding then
      for i = 5, #args, 2 do
        kept[args[i]] = true
      end
    end
    for _, term in ipairs(entry['terms']) do
      if not kept[term] then
        redis.call('ZREM', keys[4] .. term, args[1])
      end
    end
    if adding then
      redis.call('HINCRBY', keys[3], 'total_length', tonumber(args[4]) - entry['len'])
    else
      redis.call('HDEL', keys[1], args[1])
      redis.call('HDEL', keys[2], args[1])
      redis.call('HINCRBY', keys[3], 'docs', -1)
      redis.call('HINCRBY', keys[3], 'total_length', -entry['len'])
    end
  elseif adding then
    redis.call('HINCRBY', keys[3], 'docs', 1)
    redis.call('HINCRBY', keys[3], 'total_length', args[4])
  end
  if adding then
    redis.call('HSET', keys[1], args[1], args[2])
    redis.call('HSET', keys[2], args[1], args[3])
    for i = 5, #args, 2 do
      redis.call('ZADD', keys[4] .. args[i], args[i + 1], args[1])
    end
  end
  if old then
    return 1
  end
  return 0
end
