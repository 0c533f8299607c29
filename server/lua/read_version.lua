-- A Lua function, not a script: no keys and no arguments of its own.
-- Shared by recall and recall_seen. head: a record's head hash; version_key: the hash of
-- version `number`; which: "current" when the current version is wanted (`number` the one
-- believed current), else "". Returns {head fields, version fields}, {} for an unknown
-- record, {head fields, {}} for an unknown version, or {head fields} alone when the current
-- version was wanted and is not `number` (the caller reads again with the head's version).

local function read_version(head_key, version_key, number, which)
  local head = redis.call('HGETALL', head_key)
  if #head == 0 then
    return {}
  end
  if which == 'current' then
    for i = 1, #head, 2 do
      if head[i] == 'version' then
        if head[i + 1] ~= number then
          return {head}
        end
        break
      end
    end
  end
  return {head, redis.call('HGETALL', version_key)}
end

