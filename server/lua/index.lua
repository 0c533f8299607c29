-- A Lua function, not a script: no keys and no arguments of its own.
-- Shared by index_doc and remember: (re)index one document, its old postings and totals
-- taken out first. keys: docs hash, meta hash, stats hash, the term postings' prefix;
-- args: doc id, its entry (msgpack {kind, project, agent, len, terms}, or "" to only remove
-- it), its meta ("kind\tproject\tagent"), its length, then term / posting score pairs.
-- Returns 1 if the doc was indexed before, else 0.

local function index_document(keys, args)
  local old = redis.call('HGET', keys[1], args[1])
  if old then
    local entry = cmsgpack.unpack(old)
    redis.call('HDEL', keys[1], args[1])
    redis.call('HDEL', keys[2], args[1])
    redis.call('HINCRBY', keys[3], 'docs', -1)
    redis.call('HINCRBY', keys[3], 'total_length', -entry['len'])
    for _, term in ipairs(entry['terms']) do
      redis.call('ZREM', keys[4] .. term, args[1])
    end
  end
  if args[2] ~= '' then
    redis.call('HSET', keys[1], args[1], args[2])
    redis.call('HSET', keys[2], args[1], args[3])
    redis.call('HINCRBY', keys[3], 'docs', 1)
    redis.call('HINCRBY', keys[3], 'total_length', args[4])
    for i = 5, #args, 2 do
      redis.call('ZADD', keys[4] .. args[i], args[i + 1], args[1])
    end
  end
  if old then
    return 1
  end
  return 0
end

