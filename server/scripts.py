"""Lua scripts: each one is a single atomic change confined to one record's hash slot.

sha256 is not available inside Redis Lua, so callers compute hashes in Python from a
snapshot of the record head and pass the version (or outcome count) they built on; the
script applies the change only if the head still matches, otherwise it reports the head
and the caller rebuilds and retries. Concurrent writers therefore never lose a version.
"""

from __future__ import annotations

from typing import Final

from redis.asyncio import Redis

# KEYS[1] record head hash
# KEYS[2] the new version's hash key
# KEYS[3] the current version's hash key (unused when the record is new)
# ARGV[1] the current version the caller built on (0 for a new record)
# ARGV[2] the new version's sha256      ARGV[3] its confidence
# ARGV[4] its created_at                ARGV[5] its author
# ARGV[6..] field/value pairs of the new version hash
# Returns {1, new_version} on success, {0, current_version} when the head moved on.
REMEMBER: Final = """
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if current ~= tonumber(ARGV[1]) then
  return {0, current}
end
local new = current + 1
if current > 0 then
  local confidence = redis.call('HGET', KEYS[1], 'confidence')
  redis.call('HSET', KEYS[3], 'superseded_by', new, 'confidence', confidence)
end
redis.call('HSET', KEYS[2], unpack(ARGV, 6))
redis.call('HSET', KEYS[1], 'version', new, 'hash', ARGV[2], 'confidence', ARGV[3],
           'updated_at', ARGV[4], 'author', ARGV[5])
return {1, new}
"""

# KEYS[1] record head hash
# KEYS[2] prefix of the record's version keys (ends in ":v:")
# ARGV[1] the version wanted, or "" for the current one
# Returns {head fields..., {version fields...}}, {} for an unknown record, or
# {head fields..., {}} for an unknown version.
RECALL: Final = """
local head = redis.call('HGETALL', KEYS[1])
if #head == 0 then
  return {}
end
local wanted = ARGV[1]
if wanted == '' then
  wanted = redis.call('HGET', KEYS[1], 'version')
end
return {head, redis.call('HGETALL', KEYS[2] .. wanted)}
"""

# KEYS[1] record head hash
# KEYS[2] the record's outcomes log (list)
# ARGV[1] the version the caller built on   ARGV[2] the log length it built on
# ARGV[3] the confidence after the move     ARGV[4] counter field: successes | failures
# ARGV[5] the new entry's sha256            ARGV[6] the entry (msgpack)
# Returns {1, seq} on success, {0, version, length} when the record moved on.
RECORD_OUTCOME: Final = """
local version = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
local length = redis.call('LLEN', KEYS[2])
if version ~= tonumber(ARGV[1]) or length ~= tonumber(ARGV[2]) then
  return {0, version, length}
end
redis.call('HSET', KEYS[1], 'confidence', ARGV[3], 'outcome_hash', ARGV[5])
redis.call('HINCRBY', KEYS[1], ARGV[4], 1)
return {1, redis.call('RPUSH', KEYS[2], ARGV[6])}
"""

# KEYS[1] record head hash   KEYS[2] prefix of the record's version keys (ends in ":v:")
# ARGV[1] the version the caller built on   ARGV[2] forgotten at   ARGV[3] by   ARGV[4] reason
# ARGV[5] the empty value (msgpack nil)      ARGV[6..] tombstone hash of versions 1..n
# Replaces every version's value by a tombstone; hashes and links stay, so the chain still
# verifies. Returns 1, or 0 when the record moved on (the caller retries).
FORGET_RECORD: Final = """
if tonumber(redis.call('HGET', KEYS[1], 'version') or '0') ~= tonumber(ARGV[1]) then
  return 0
end
for i = 6, #ARGV do
  redis.call('HSET', KEYS[2] .. (i - 5), 'value', ARGV[5], 'tombstone_hash', ARGV[i],
             'forgotten_at', ARGV[2], 'forgotten_by', ARGV[3], 'forgotten_reason', ARGV[4])
end
redis.call('HSET', KEYS[1], 'forgotten_at', ARGV[2])
return 1
"""

# KEYS[1] search stats hash   KEYS[2] search meta hash (doc -> "kind\tproject\tagent")
# KEYS[3] a scratch sorted set (deleted before returning)
# KEYS[4..] the postings of the query's terms (doc -> the term's length-normalised tf part)
# ARGV[1] limit   ARGV[2] kinds, comma-separated ("" = any)
# ARGV[3] project ("" = any; documents of no project always match)
# ARGV[4] agent ("" = any; documents of no agent, i.e. shared ones, always match)
# ARGV[5] try the threshold algorithm (below) when the postings hold more entries than this
# Returns {doc, score, meta, ...} for the best ``limit`` documents the filters want, by BM25,
# best first: each posting already holds tf·(k1+1)/(tf + k1·(1−b+b·len/avglen)), so a
# query only weights every term's postings by its idf and sums them — a ZUNIONSTORE, in C,
# for short postings, walked best first until ``limit`` documents pass the filters.
SEARCH: Final = """
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
    terms[#terms + 1] = {key = KEYS[i], weight = weight, frequency = frequency, read = 0}
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
local function wanted(meta)
  if not meta then
    return false
  end
  local kind, project, agent = string.match(meta, '^([^\t]*)\t([^\t]*)\t(.*)$')
  return (ARGV[2] == '' or kinds[kind] == true) and (ARGV[3] == '' or project == '' or project == ARGV[3])
    and (ARGV[4] == '' or agent == '' or agent == ARGV[4])
end

-- Fagin's threshold algorithm: read every term's postings best part first, in blocks that
-- double (a list with little left is read to its end); score each new document exactly
-- (ZMSCORE on every term) and keep those the filters want. A document not read yet scores
-- at most the sum of weight × the last part read in each list not read to its end; once
-- the limit-th best kept score reaches that sum, the result is final. Gives up (nil) once
-- it has read a quarter of the postings.
local function threshold_top()
  local seen, docs, best = {}, {}, {}
  local block = math.max(limit, 10)
  while true do
    local fresh, bound = {}, 0
    for _, term in ipairs(terms) do
      if term.read < term.frequency then
        local stop = term.read + block - 1
        if term.frequency - term.read <= 4 * block then
          stop = -1
        end
        local entries = redis.call('ZRANGE', term.key, term.read, stop, 'REV', 'WITHSCORES')
        term.read = term.read + #entries / 2
        for j = 1, #entries, 2 do
          if not seen[entries[j]] then
            seen[entries[j]] = true
            fresh[#fresh + 1] = entries[j]
          end
        end
        if term.read < term.frequency then
          bound = bound + term.weight * tonumber(entries[#entries])
        end
      end
    end
    for from = 1, #fresh, 1000 do
      local batch = {unpack(fresh, from, math.min(#fresh, from + 999))}
      local found = redis.call('HMGET', KEYS[2], unpack(batch))
      local kept, kept_meta, sums = {}, {}, {}
      for j = 1, #batch do
        if wanted(found[j]) then
          kept[#kept + 1] = batch[j]
          kept_meta[#kept] = found[j]
        end
      end
      for j = 1, #kept do
        sums[j] = 0
      end
      if #kept > 0 then
        for _, term in ipairs(terms) do
          local parts = redis.call('ZMSCORE', term.key, unpack(kept))
          for j = 1, #kept do
            if parts[j] then
              sums[j] = sums[j] + term.weight * tonumber(parts[j])
            end
          end
        end
      end
      for j = 1, #kept do
        docs[#docs + 1] = {kept[j], sums[j], kept_meta[j]}
        best[#best + 1] = -sums[j]  -- negated: the default (fast) sort puts the best first
      end
    end
    table.sort(best)
    for j = #best, limit + 1, -1 do
      best[j] = nil
    end
    if bound == 0 or (#best >= limit and -best[limit] >= bound) then
      local floor = best[#best] and -best[#best] or 0
      local order = {}
      for _, doc in ipairs(docs) do
        if doc[2] >= floor then
          order[#order + 1] = doc
        end
      end
      table.sort(order, function(a, b)
        if a[2] ~= b[2] then return a[2] > b[2] end
        return a[1] > b[1]
      end)
      local found = {}
      for j = 1, math.min(#order, limit) do
        found[#found + 1] = order[j][1]
        found[#found + 1] = string.format('%.17g', order[j][2])
        found[#found + 1] = order[j][3]
      end
      return found
    end
    if #docs * 4 > listed then
      return nil
    end
    block = block * 2
  end
end

local found
if listed > tonumber(ARGV[5]) then
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
  found = {}
  local from, chunk = 0, math.max(limit, 100)
  while #found / 3 < limit do
    local ranked = redis.call('ZRANGE', KEYS[3], from, from + chunk - 1, 'REV', 'WITHSCORES')
    if #ranked == 0 then
      break
    end
    for j = 1, #ranked, 2 do
      local meta = redis.call('HGET', KEYS[2], ranked[j])
      if wanted(meta) and #found / 3 < limit then
        found[#found + 1] = ranked[j]
        found[#found + 1] = ranked[j + 1]
        found[#found + 1] = meta
      end
    end
    from = from + chunk
  end
  redis.call('DEL', KEYS[3])
end
return found
"""

# KEYS[1] search docs hash   KEYS[2] search meta hash   KEYS[3] search stats hash
# KEYS[4] the prefix of the term postings (same hash tag)
# ARGV[1] doc id   ARGV[2] its entry (msgpack {kind, project, agent, len, terms}), or "" to
# only remove the doc   ARGV[3] its meta ("kind\tproject\tagent")   ARGV[4] its length
# ARGV[5..] term / posting score pairs
# (Re)indexes one document in one call: the old postings and totals are taken out first.
# Returns 1 if the doc was indexed before, else 0.
INDEX_DOC: Final = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local entry = cmsgpack.unpack(old)
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HINCRBY', KEYS[3], 'docs', -1)
  redis.call('HINCRBY', KEYS[3], 'total_length', -entry['len'])
  for _, term in ipairs(entry['terms']) do
    redis.call('ZREM', KEYS[4] .. term, ARGV[1])
  end
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  redis.call('HINCRBY', KEYS[3], 'docs', 1)
  redis.call('HINCRBY', KEYS[3], 'total_length', ARGV[4])
  for i = 5, #ARGV, 2 do
    redis.call('ZADD', KEYS[4] .. ARGV[i], ARGV[i + 1], ARGV[1])
  end
end
if old then
  return 1
end
return 0
"""

# KEYS[1] session hash   KEYS[2] the session's touched hash
# ARGV[1] agent          ARGV[2] now (ISO)      ARGV[3..] ref/version pairs seen
# Creates the session on first use, reopens an abandoned one, records activity and what it
# saw. Returns the session's status.
TOUCH_SESSION: Final = """
redis.call('HSETNX', KEYS[1], 'agent', ARGV[1])
redis.call('HSETNX', KEYS[1], 'started_at', ARGV[2])
redis.call('HSETNX', KEYS[1], 'status', 'active')
if redis.call('HGET', KEYS[1], 'status') == 'abandoned' then
  redis.call('HSET', KEYS[1], 'status', 'active')
end
redis.call('HSET', KEYS[1], 'last_activity_at', ARGV[2])
if #ARGV > 2 then
  redis.call('HSET', KEYS[2], unpack(ARGV, 3))
end
return redis.call('HGET', KEYS[1], 'status')
"""

# -- handoff packets --------------------------------------------------------------------------
# Every script below touches one agent's inbox only (one hash slot). Packet keys are built
# from the inbox's packet-key prefix, which carries the same hash tag.

# Shared by the packet scripts: move a packet to a new state and append the transition
# (time, agent, from-state, to-state, reason) to its log.
_MOVE: Final = """
local function move(packet, to, agent, reason, at)
  local from = redis.call('HGET', packet, 'state') or 'new'
  redis.call('HSET', packet, 'state', to, 'updated_at', at)
  redis.call('RPUSH', packet .. ':log',
             cmsgpack.pack({at = at, agent = agent, from = from, to = to, reason = reason}))
end
"""

# KEYS[1] packet hash   KEYS[2] inbox queued   KEYS[3] inbox expiring   KEYS[4] inbox all
# ARGV[1] packet id     ARGV[2] created (µs)   ARGV[3] expires (µs) or ""
# ARGV[4] created_at    ARGV[5] sender         ARGV[6..] field/value pairs of the packet
# Returns {the packet's fields, its transition log} as stored.
CREATE_PACKET: Final = _MOVE + """
redis.call('HSET', KEYS[1], unpack(ARGV, 6))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
end
move(KEYS[1], 'queued', ARGV[5], 'handed off', ARGV[4])
return {redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[1] .. ':log', 0, -1)}
"""

# KEYS[1] inbox queued  KEYS[2] inbox claimed  KEYS[3] inbox expiring  KEYS[4] packet prefix
# KEYS[5] inbox expired
# ARGV[1] packet id, or "" for the oldest queued one
# ARGV[2] now (µs)      ARGV[3] now (ISO)      ARGV[4] lease end (µs)  ARGV[5] lease end (ISO)
# ARGV[6] claimant      ARGV[7] reason     ARGV[8] the claiming RQ job's id, "" for a pull
# Returns {1, id, packet fields...}; {} when nothing is queued; {0, state} when the packet
# asked for is not queued (claimed by someone else, settled, or just expired). The RQ job
# holding a claim may claim again (its retry after the handler raised).
# Queued packets whose expiry has passed are expired on the way instead of being claimed.
CLAIM_PACKET: Final = _MOVE + """
local now = tonumber(ARGV[2])
while true do
  local id = ARGV[1]
  if id == '' then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0)
    if #first == 0 then
      return {}
    end
    id = first[1]
  elseif not redis.call('ZSCORE', KEYS[1], id) then
    local held = KEYS[4] .. id
    local state = redis.call('HGET', held, 'state') or ''
    if state == 'claimed' and ARGV[8] ~= '' and redis.call('HGET', held, 'job') == ARGV[8] then
      -- the same worker job, retried by RQ after its handler raised: renew its claim
      redis.call('ZADD', KEYS[2], ARGV[4], id)
      redis.call('HINCRBY', held, 'deliveries', 1)
      redis.call('HSET', held, 'lease_until', ARGV[5])
      move(held, 'claimed', ARGV[6], 'retry', ARGV[3])
      return {1, id, redis.call('HGETALL', held)}
    end
    return {0, state}
  end
  local packet = KEYS[4] .. id
  redis.call('ZREM', KEYS[1], id)
  local expires = tonumber(redis.call('HGET', packet, 'expires_us') or '')
  if expires and expires <= now then
    redis.call('ZREM', KEYS[3], id)
    redis.call('ZADD', KEYS[5], now, id)
    move(packet, 'expired', '', 'expired before it was claimed', ARGV[3])
    if ARGV[1] ~= '' then
      return {0, 'expired'}
    end
  else
    redis.call('ZADD', KEYS[2], ARGV[4], id)
    redis.call('HINCRBY', packet, 'deliveries', 1)
    redis.call('HSET', packet, 'claimed_by', ARGV[6], 'lease_until', ARGV[5], 'job', ARGV[8])
    move(packet, 'claimed', ARGV[6], ARGV[7], ARGV[3])
    return {1, id, redis.call('HGETALL', packet)}
  end
end
"""

# KEYS[1] packet hash   KEYS[2] inbox claimed
# ARGV[1] packet id     ARGV[2] the claimant   ARGV[3] its job id
# ARGV[4] new lease deadline (µs)              ARGV[5] the same as ISO text
# Extends a claim's lease while its handler runs; 0 when the packet is no longer claimed by
# that claimant and job (the heartbeat then stops).
RENEW_LEASE: Final = """
if redis.call('HGET', KEYS[1], 'state') ~= 'claimed' or redis.call('HGET', KEYS[1], 'claimed_by') ~= ARGV[2]
    or redis.call('HGET', KEYS[1], 'job') ~= ARGV[3] then
  return 0
end
redis.call('ZADD', KEYS[2], 'XX', ARGV[4], ARGV[1])
redis.call('HSET', KEYS[1], 'lease_until', ARGV[5])
return 1
"""

# KEYS[1] packet hash   KEYS[2] inbox queued   KEYS[3] inbox claimed
# KEYS[4] inbox failed  KEYS[5] inbox expiring KEYS[6] inbox expired
# ARGV[1] packet id     ARGV[2] from-state it must be in     ARGV[3] to-state
# (failed or expired -> queued is an operator's requeue: a fresh start, expiry and
# delivery count cleared; the log keeps the history)
# ARGV[4] acting agent; when not "" and the packet is claimed, it must be the claimant
# ARGV[5] reason        ARGV[6] now (ISO)      ARGV[7] now (µs)       ARGV[8] error text or ""
# Returns {1, from, job_seq}; {-1} unknown packet; {0, state} wrong state;
# {-2, claimant} when another agent holds the claim.
SETTLE_PACKET: Final = _MOVE + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return {-1}
end
if state ~= ARGV[2] then
  return {0, state}
end
local claimant = redis.call('HGET', KEYS[1], 'claimed_by') or ''
if ARGV[4] ~= '' and state == 'claimed' and claimant ~= ARGV[4] then
  return {-2, claimant}
end
local to = ARGV[3]
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('HDEL', KEYS[1], 'lease_until')
if state ~= 'claimed' and to == 'queued' then
  redis.call('ZREM', KEYS[5], ARGV[1])
  redis.call('HSET', KEYS[1], 'expires_us', '', 'deliveries', 0, 'error', '')
end
if ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'error', ARGV[8])
end
if to == 'queued' then
  redis.call('ZADD', KEYS[2], redis.call('HGET', KEYS[1], 'created_us'), ARGV[1])
  redis.call('HINCRBY', KEYS[1], 'job_seq', 1)
else
  redis.call('ZREM', KEYS[5], ARGV[1])
  if to == 'failed' then
    redis.call('ZADD', KEYS[4], ARGV[7], ARGV[1])
  end
end
move(KEYS[1], to, ARGV[4], ARGV[5], ARGV[6])
return {1, state, redis.call('HGET', KEYS[1], 'job_seq')}
"""

# KEYS[1] inbox claimed KEYS[2] inbox queued   KEYS[3] inbox failed   KEYS[4] packet prefix
# KEYS[5] inbox expiring
# ARGV[1] now (µs)      ARGV[2] now (ISO)      ARGV[3] max deliveries ARGV[4] batch size
# Returns {requeued ids, failed ids}: leases that ran out go back to the queue (front
# position kept, redelivery counted) or, after max deliveries, to failed.
EXPIRE_LEASES: Final = _MOVE + """
local requeued, failed = {}, {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[4])
for _, id in ipairs(due) do
  local packet = KEYS[4] .. id
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', packet, 'lease_until')
  if tonumber(redis.call('HGET', packet, 'deliveries') or '0') >= tonumber(ARGV[3]) then
    redis.call('HSET', packet, 'error', 'max deliveries')
    redis.call('ZADD', KEYS[3], ARGV[1], id)
    redis.call('ZREM', KEYS[5], id)
    move(packet, 'failed', '', 'max deliveries', ARGV[2])
    table.insert(failed, id)
  else
    redis.call('HINCRBY', packet, 'redeliveries', 1)
    redis.call('HINCRBY', packet, 'job_seq', 1)
    redis.call('ZADD', KEYS[2], redis.call('HGET', packet, 'created_us'), id)
    move(packet, 'queued', '', 'lease expired', ARGV[2])
    table.insert(requeued, id)
  end
end
return {requeued, failed}
"""

# KEYS[1] inbox expiring  KEYS[2] inbox queued  KEYS[3] packet prefix  KEYS[4] inbox expired
# ARGV[1] now (µs)        ARGV[2] now (ISO)     ARGV[3] batch size
# Returns the ids expired: queued packets past their expiry. A claimed packet keeps its
# entry, so that it can still expire if it is released back to the queue.
EXPIRE_PACKETS: Final = _MOVE + """
local expired = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(due) do
  local packet = KEYS[3] .. id
  local state = redis.call('HGET', packet, 'state')
  if state == 'queued' then
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZADD', KEYS[4], ARGV[1], id)
    move(packet, 'expired', '', 'expired before it was claimed', ARGV[2])
    table.insert(expired, id)
  end
  if state ~= 'claimed' then
    redis.call('ZREM', KEYS[1], id)
  end
end
return expired
"""


class Scripts:
    """Every script registered once on one client (redis-py reloads them after NOSCRIPT)."""

    async def load(self, redis: Redis) -> int:
        """Load every script not yet in Redis' cache (after a restart or SCRIPT FLUSH);
        returns how many scripts are ready."""
        scripts = [value for value in vars(self).values() if hasattr(value, "sha")]
        for script in scripts:  # SCRIPT LOAD is idempotent (and reaches every cluster primary)
            await redis.script_load(script.script)
        return len(scripts)

    def __init__(self, redis: Redis) -> None:
        self.remember = redis.register_script(REMEMBER)
        self.recall = redis.register_script(RECALL)
        self.record_outcome = redis.register_script(RECORD_OUTCOME)
        self.touch_session = redis.register_script(TOUCH_SESSION)
        self.forget_record = redis.register_script(FORGET_RECORD)
        self.search = redis.register_script(SEARCH)
        self.index_doc = redis.register_script(INDEX_DOC)
        self.create_packet = redis.register_script(CREATE_PACKET)
        self.claim_packet = redis.register_script(CLAIM_PACKET)
        self.renew_lease = redis.register_script(RENEW_LEASE)
        self.settle_packet = redis.register_script(SETTLE_PACKET)
        self.expire_leases = redis.register_script(EXPIRE_LEASES)
        self.expire_packets = redis.register_script(EXPIRE_PACKETS)
