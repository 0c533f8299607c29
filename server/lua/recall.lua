-- KEYS[1] record head hash   KEYS[2] the hash of version ARGV[1]
-- ARGV[1] the version wanted, or the one believed current when ARGV[2] is "current"
-- ARGV[2] "current" when the current version is wanted, else ""
-- Returns {head fields, version fields}, {} for an unknown record, {head fields, {}} for an
-- unknown version, or {head fields} alone when the current version was wanted and is not
-- ARGV[1] (the caller reads again with the head's version).

local head = redis.call('HGETALL', KEYS[1])
if #head == 0 then
  return {}
end
if ARGV[2] == 'current' then
  for i = 1, #head, 2 do
    if head[i] == 'version' then
      if head[i + 1] ~= ARGV[1] then
        return {head}
      end
      break
    end
  end
end
return {head, redis.call('HGETALL', KEYS[2])}
