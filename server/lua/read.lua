-- A Lua function, not a script: no keys and no arguments of its own.
-- Shared by recall and claim_packet (every claim reads its packet's pins). head: a record's
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
