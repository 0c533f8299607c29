-- Lua functions, not a script: no keys and no arguments of their own.
-- Shared by index_doc and remember: (re)index one document. keys: docs hash, meta hash,
-- stats hash, vectors hash, changes stream, then the postings (sorted sets) of the terms
-- args names, in their order; args: doc id, its entry (msgpack {kind, project, agent, len,
-- terms}, or "" to only remove it), its meta ("kind\tproject\tagent\tadded"), its length,
-- its vector ("" for none), how many terms it has (N), N term / count-in-the-doc pairs,
-- then the terms of the further postings given (the document's terms when it was last
-- indexed, as the caller believes them).
-- The vectors hash holds each document's vector (vectors.py); every document added or
-- taken out is named in the changes stream, which each process's copy of the vectors
-- follows (the oldest entries past CHANGES_KEPT are trimmed: a copy that far behind loads
-- the hash again).
-- Each posting holds the term's BM25 part but for idf, tf·(k1+1)/(tf + k1·(1−b+b·len/avglen)),
-- with the average length of the namespace's documents as it is once this one is counted
-- (so a namespace's first documents are normalised too).
-- A document indexed again keeps its entry's place and only moves what changed: its old
-- terms that are gone lose their posting, every new term's posting is set (ZADD replaces a
-- kept term's score), and the totals move by the difference. The stats hash also counts
-- the postings that exist ('terms': one key each), for the namespace's quota.

local K1, B = 1.2, 0.75  -- BM25's term-frequency saturation and length normalisation
local CHANGES_KEPT = 10000
local FIRST_POSTING = 5  -- keys[FIRST_POSTING + i]: the i-th posting given

-- term -> its posting's key, for every posting given.
local function postings_of(keys, args)
  local postings, count = {}, tonumber(args[6])
  for i = 1, count do
    postings[args[5 + 2 * i]] = keys[FIRST_POSTING + i]
  end
  for i = 7 + 2 * count, #args do
    postings[args[i]] = keys[FIRST_POSTING + count + (i - 6 - 2 * count)]
  end
  return postings
end

-- The terms of the document's indexed entry whose postings were not given (nil when none
-- are missing): the caller gives them and calls again, since a script touches only the
-- keys it was given.
local function missing_postings(keys, args)
  local old = redis.call('HGET', keys[1], args[1])
  if not old then
    return nil
  end
  local postings, missing = postings_of(keys, args), {}
  for _, term in ipairs(cmsgpack.unpack(old)['terms']) do
    if not postings[term] then
      missing[#missing + 1] = term
    end
  end
  if #missing == 0 then
    return nil
  end
  return missing
end

-- missing_postings as a script's refusal, {code, term, ...}; nil when none is missing.
local function refused_postings(keys, args, code)
  local missing = missing_postings(keys, args)
  if missing then
    table.insert(missing, 1, code)
  end
  return missing
end

-- Returns 1 if the doc was indexed before, else 0. Every posting it touches must be given
-- (missing_postings first).
local function index_document(keys, args)
  local old = redis.call('HGET', keys[1], args[1])
  local adding = args[2] ~= ''
  local postings, count = postings_of(keys, args), tonumber(args[6])
  if old then
    local entry = cmsgpack.unpack(old)
    local kept = {}
    for i = 1, count do
      kept[args[5 + 2 * i]] = true
    end
    for _, term in ipairs(entry['terms']) do
      if not kept[term] then
        if redis.call('ZREM', postings[term], args[1]) == 1
            and redis.call('EXISTS', postings[term]) == 0 then
          redis.call('HINCRBY', keys[3], 'terms', -1)
        end
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
    local totals = redis.call('HMGET', keys[3], 'docs', 'total_length')
    local average = tonumber(totals[2]) / tonumber(totals[1])
    local norm = K1 * (1 - B + B * tonumber(args[4]) / math.max(average, 1))
    for i = 1, count do
      local tf = tonumber(args[6 + 2 * i])
      local part = tf * (K1 + 1) / (tf + norm)
      local posting = keys[FIRST_POSTING + i]
      if redis.call('ZADD', posting, string.format('%.17g', part), args[1]) == 1
          and redis.call('ZCARD', posting) == 1 then
        redis.call('HINCRBY', keys[3], 'terms', 1)
      end
    end
  end
  if adding and args[5] ~= '' then
    redis.call('HSET', keys[4], args[1], args[5])
  else
    redis.call('HDEL', keys[4], args[1])
  end
  if adding or old then
    redis.call('XADD', keys[5], 'MAXLEN', '~', CHANGES_KEPT, '*', 'doc', args[1])
  end
  if old then
    return 1
  end
  return 0
end
