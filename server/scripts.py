"""Lua scripts: each one is a single atomic change confined to one record's hash slot.

sha256 is not available inside Redis Lua, so callers compute hashes in Python from a
snapshot of the record head and pass the version (or outcome count) they built on; the
script applies the change only if the head still matches, otherwise it reports the head
and the caller rebuilds and retries. Concurrent writers therefore never lose a version.
"""

from __future__ import annotations

from typing import Final

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
