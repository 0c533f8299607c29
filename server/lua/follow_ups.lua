-- Lua functions, not a script: no keys and no arguments of their own (but run_commands,
-- which reads the script's). Shared by the scripts that run what follows a change inside
-- themselves (one Redis only): remember, hand_off and forget_record.

-- Copied element by element: unpack() stops at Lua's stack limit (about 8,000 values), and a
-- large document has that many postings.
local function slice(list, first, last)
  local part = {}
  for i = first, last do
    part[#part + 1] = list[i]
  end
  return part
end

-- An error raised by redis.call is a table ({err = ...}) since Redis 7, a string before.
local function error_text(failure)
  if type(failure) == 'table' then
    return tostring(failure.err)
  end
  return tostring(failure)
end

-- Runs the commands a change ends with: from ARGV[arg] on, each as its argument count (N),
-- its name and its N - 1 arguments; from KEYS[key] on, one key each. Their replies.
local function run_commands(key, arg)
  local replies = {}
  while arg <= #ARGV do
    local count = tonumber(ARGV[arg])
    replies[#replies + 1] = redis.call(ARGV[arg + 1], KEYS[key], unpack(ARGV, arg + 2, arg + count))
    key, arg = key + 1, arg + count + 1
  end
  return replies
end

-- Runs each follow-up (a function of no arguments) on its own, so one that fails (a key of
-- the wrong type, no memory) costs only itself. Returns the first failure's message, or nil
-- when all of them ran.
local function run_follow_ups(follow_ups)
  local first_failure = nil
  for _, follow_up in ipairs(follow_ups) do
    local ran, failure = pcall(follow_up)
    if not ran and not first_failure then
      first_failure = error_text(failure)
    end
  end
  return first_failure
end
