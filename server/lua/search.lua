-- KEYS[1] search stats hash   KEYS[2] search meta hash (doc -> "kind\tproject\tagent\tadded")
-- KEYS[3] a scratch sorted set (deleted before returning)
-- KEYS[4..] the postings of the query's terms (doc -> the term's length-normalised tf part)
-- ARGV[1] limit   ARGV[2] kinds, comma-separated ("" = any)
-- ARGV[3] project ("" = any; documents of no project always match)
-- ARGV[4] agent ("" = any; documents of no agent, i.e. shared ones, always match)
-- ARGV[5] try the threshold algorithm (below) when the postings hold more entries than this
-- ARGV[6] the work one query may do: postings read plus scores looked up (see below)
-- Returns {doc, score, meta, ...} for the best ``limit`` documents the filters want, by BM25,
-- best first: each posting already holds tf·(k1+1)/(tf + k1·(1−b+b·len/avglen)), so a
-- query only weights every term's postings by its idf and sums them — a ZUNIONSTORE, in C,
-- for short postings, walked best first until ``limit`` documents pass the filters. Equal
-- scores rank the document added later first, then by id: the same data ranks the same.

local total_docs = tonumber(redis.call('HGET', KEYS[1], 'docs') or '0')
if total_docs <= 0 then
  return {}
end
local limit = tonumber(ARGV[1])
local terms, listed = {}, 0
for i = 4, #KEYS do
  local frequency = redis.call('ZCARD', KEYS[i])
  if frequency > 0 then
    local weight = math.log(1 + (total_docs - frequency + 0.5) / (frequency + 0.5))
    terms[#terms + 1] = {key = KEYS[i], weight = weight, frequency = frequency, read = 0, last = math.huge}
    listed = listed + frequency
  end
end
if #terms == 0 then
  return {}
end

local kinds = {}
for kind in string.gmatch(ARGV[2], '[^,]+') do
  kinds[kind] = true
end
-- kind, project, agent and when it was added ('' in a meta written before it was kept)
local function fields(meta)
  local kind, project, agent, added = string.match(meta, '^([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$')
  if not kind then
    kind, project, agent = string.match(meta, '^([^\t]*)\t([^\t]*)\t(.*)$')
  end
  return kind, project, agent, added or ''
end
local function wanted(meta)
  if not meta then
    return false
  end
  local kind, project, agent = fields(meta)
  return (ARGV[2] == '' or kinds[kind] == true) and (ARGV[3] == '' or project == '' or project == ARGV[3])
    and (ARGV[4] == '' or agent == '' or agent == ARGV[4])
end
-- {doc, score, meta} in answer order: best score first, among equals the one added later,
-- then the lower id
local function before(a, b)
  if a[2] ~= b[2] then return a[2] > b[2] end
  local _, _, _, added_a = fields(a[3])
  local _, _, _, added_b = fields(b[3])
  if added_a ~= added_b then return added_a > added_b end
  return a[1] < b[1]
end
local function answer(docs)
  table.sort(docs, before)
  local found = {}
  for j = 1, math.min(#docs, limit) do
    found[#found + 1] = docs[j][1]
    found[#found + 1] = string.format('%.17g', docs[j][2])
    found[#found + 1] = docs[j][3]
  end
  return found
end

-- Fagin's threshold algorithm: read the terms' postings best part first, in blocks that
-- double, each term's share of a round's reads in proportion to its part of the bound (a
-- rare term's short list is read to its end first; a list with little left is read to its
-- end); score each new document exactly (its parts read this round, the others looked up
-- with ZMSCORE), and read the filters (the meta) only of documents that could still be among
-- the best. A document not read yet scores at most the sum of weight × the last part read
-- in each list not read to its end; once the limit-th best kept score is above that sum,
-- the result is final. Gives up (nil) once it has read a quarter of the postings, when a
-- union of them all is within what is left of the budget.
-- The budget holds for every read: a round reads at most what it can also score with the
-- work left (a posting read costs 1, a part looked up 1: a document scored costs #terms),
-- so one query's postings read plus parts looked up never pass it. Then it answers the
-- best documents of what it read (the best parts of every term's postings): one query
-- never holds the server long.
local budget = tonumber(ARGV[6])
local function best_of(docs, floor)
  local order = {}
  for _, doc in ipairs(docs) do
    if doc[2] >= floor then
      order[#order + 1] = doc
    end
  end
  return answer(order)
end

-- a term's part of the bound: weight × the last part read (its weight before any read)
local function reach(term)
  return term.weight * (term.read > 0 and term.last or 1)
end

local function threshold_top()
  local seen, docs, best = {}, {}, {}  -- seen[doc]: the round that first read it
  local block = math.max(limit, 10)
  local work, scored, round = 0, 0, 0
  while true do
    round = round + 1
    local open, shares = 0, 0
    for _, term in ipairs(terms) do
      if term.read < term.frequency then
        open = open + 1
        shares = shares + reach(term)
      end
    end
    local allowance = math.floor((budget - work) / #terms)
    if work == 0 then
      allowance = math.max(allowance, open)
    end
    local starved = allowance < open
    local fresh, bound = {}, 0
    local known = {}  -- known[t][doc]: the part of term t read this round
    for t, term in ipairs(terms) do
      local parts = {}
      known[t] = parts
      if term.read < term.frequency and not starved then
        local share = math.max(1, math.floor(allowance * reach(term) / shares))
        local rest = term.frequency - term.read
        local count = math.min(block, share)
        if rest <= 4 * block and rest <= share then
          count = rest
        end
        local entries = redis.call('ZRANGE', term.key, term.read, term.read + count - 1, 'REV', 'WITHSCORES')
        local read = #entries / 2
        term.read = term.read + read
        work = work + read
        for j = 1, #entries, 2 do
          local doc = entries[j]
          local first = seen[doc]
          if not first then
            seen[doc] = round
            fresh[#fresh + 1] = doc
          end
          if (first or round) == round then
            parts[doc] = tonumber(entries[j + 1])
          end
        end
        if read > 0 then
          term.last = tonumber(entries[#entries])
        end
      end
      if term.read < term.frequency then
        bound = bound + term.weight * term.last
      end
    end
    -- each fresh document's exact score: the parts read this round, the others looked up
    local sums = {}
    for j = 1, #fresh do
      sums[j] = 0
    end
    for t, term in ipairs(terms) do
      local parts, missing, at = known[t], {}, {}
      for j, doc in ipairs(fresh) do
        local part = parts[doc]
        if part then
          sums[j] = sums[j] + term.weight * part
        else
          missing[#missing + 1] = doc
          at[#at + 1] = j
        end
      end
      work = work + #missing
      for from = 1, #missing, 1000 do
        local upto = math.min(#missing, from + 999)
        local found = redis.call('ZMSCORE', term.key, unpack(missing, from, upto))
        for j = from, upto do
          local part = found[j - from + 1]
          if part then
            sums[at[j]] = sums[at[j]] + term.weight * tonumber(part)
          end
        end
      end
    end
    scored = scored + #fresh
    -- the filters only for those that could still be among the best
    local floor = #best >= limit and -best[limit] or -math.huge
    local contenders, contender_sums = {}, {}
    for j = 1, #fresh do
      if sums[j] >= floor then
        contenders[#contenders + 1] = fresh[j]
        contender_sums[#contenders] = sums[j]
      end
    end
    for from = 1, #contenders, 1000 do
      local upto = math.min(#contenders, from + 999)
      local found = redis.call('HMGET', KEYS[2], unpack(contenders, from, upto))
      for j = from, upto do
        local meta = found[j - from + 1]
        if wanted(meta) then
          docs[#docs + 1] = {contenders[j], contender_sums[j], meta}
          best[#best + 1] = -contender_sums[j]  -- negated: the default sort puts the best first
        end
      end
    end
    table.sort(best)
    for j = #best, limit + 1, -1 do
      best[j] = nil
    end
    -- strictly above: a document not read yet could tie with the last one kept
    if bound == 0 or (#best >= limit and -best[limit] > bound) or starved then
      return best_of(docs, best[#best] and -best[#best] or 0)
    end
    if scored * 4 > listed and listed <= budget - work then
      return nil
    end
    block = block * 2
  end
end

local found
if listed > tonumber(ARGV[5]) or listed > budget then
  found = threshold_top()
end
if not found then
  local union = {'ZUNIONSTORE', KEYS[3], #terms}
  for _, term in ipairs(terms) do
    union[#union + 1] = term.key
  end
  union[#union + 1] = 'WEIGHTS'
  for _, term in ipairs(terms) do
    union[#union + 1] = term.weight
  end
  redis.call(unpack(union))
  -- walked best first while fewer than limit are kept, and on through scores tied with the
  -- limit-th one (the order among equals is decided by when they were added)
  local kept, cut = {}, nil
  local from, chunk = 0, math.max(limit, 100)
  local walking = true
  while walking do
    local ranked = redis.call('ZRANGE', KEYS[3], from, from + chunk - 1, 'REV', 'WITHSCORES')
    if #ranked == 0 then
      break
    end
    for j = 1, #ranked, 2 do
      local score = tonumber(ranked[j + 1])
      if cut and score < cut then
        walking = false
        break
      end
      local meta = redis.call('HGET', KEYS[2], ranked[j])
      if wanted(meta) then
        kept[#kept + 1] = {ranked[j], score, meta}
        if #kept == limit then
          cut = score
        end
      end
    end
    from = from + chunk
  end
  redis.call('DEL', KEYS[3])
  found = answer(kept)
end
return found
