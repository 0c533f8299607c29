-- KEYS[1] record head hash
-- KEYS[2] prefix of the record's version keys (ends in ":v:")
-- ARGV[1] the version wanted, or "" for the current one
-- Returns {head fields..., {version fields...}}, {} for an unknown record, or
-- {head fields..., {}} for an unknown version.

local head = redis.call('HGETALL', KEYS[1])
if #head == 0 then
  return {}
end
local wanted = ARGV[1]
if wanted == '' then
  wanted = redis.call('HGET', KEYS[1], 'version')
end
return {head, redis.call('HGETALL', KEYS[2] .. wanted)}
