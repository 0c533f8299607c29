-- Not a script, and no keys and no arguments of its own: put in front of every script when
-- BATON_LUA_KEY_CHECK is 1 (scripts.py), it reads the script's KEYS. Shadows redis.call and
-- redis.pcall with versions that refuse a command touching a key the script was not given
-- in KEYS (the command's keys as Redis's COMMAND GETKEYS names them), and pcall with one
-- that lets that refusal through (follow-ups run under pcall).

local declared = {}
for _, key in ipairs(KEYS) do
  declared[key] = true
end

local function refuse_undeclared(...)
  local found, keys = pcall(redis.call, 'COMMAND', 'GETKEYS', ...)
  if not found then
    return  -- a command without keys
  end
  for _, key in ipairs(keys) do
    if not declared[key] then
      error('UNDECLARED key ' .. key .. ' touched by ' .. tostring((...)))
    end
  end
end

local lua_pcall = pcall
local redis = setmetatable({
  call = function(...)
    refuse_undeclared(...)
    return redis.call(...)
  end,
  pcall = function(...)
    refuse_undeclared(...)
    return redis.pcall(...)
  end,
}, {__index = redis})

local function pcall(f, ...)
  local outcome = {lua_pcall(f, ...)}
  if not outcome[1] then
    local failure = outcome[2]
    local text = type(failure) == 'table' and tostring(failure.err) or tostring(failure)
    if string.find(text, 'UNDECLARED', 1, true) then
      error(failure)
    end
  end
  return unpack(outcome)
end
