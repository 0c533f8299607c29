-- A Lua function, not a script: no keys and no arguments of its own.
-- Used by recall (a claim reads its pins with read_pin, in claim_packet.lua). head: a record's
-- head hash; version_prefix: the prefix of its version keys (ends in ":v:"); wanted: the
-- version wanted, or "" for the current one.
-- Returns {head fields, version fields}, {} for an unknown record, or {head fields, {}} for
-- an unknown version.

local function read_record(head, version_prefix, wanted)
  local fields = redis.call('HGETALL', head)
  if #fields == 0 then
    return {}
  end
  if wanted == '' then
    wanted = redis.call('HGET', head, 'version')
  end
  return {fields, redis.call('HGETALL', version_prefix .. wanted)}
end
