-- KEYS[1] record head hash
-- KEYS[2] prefix of the record's version keys (ends in ":v:")
-- ARGV[1] the version wanted, or "" for the current one
-- Returns {head fields, version fields}, {} for an unknown record, or {head fields, {}} for
-- an unknown version.

local head = redis.call('HGETALL', KEYS[1])
if #head == 0 then
  return {}
end
local wanted = ARGV[1]
if wanted == '' then  -- the current one: the head names it (no second read of the head)
  for i = 1, #head, 2 do
    if head[i] == 'version' then
      wanted = head[i + 1]
      break
    end
  end
end
return {head, redis.call('HGETALL', KEYS[2] .. wanted)}
