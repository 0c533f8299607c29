-- A Lua function, not a script: no keys and no arguments of its own. Runs a batch of
-- follow-up commands inside the script that decided they should run, on one Redis only
-- (their keys are not declared).
-- Every follow-up runs on its own (one that fails costs only itself); run_follow_ups
-- returns the first failure's message, or nil.
-- packed: a msgpack list of commands, each a plain command ({name, arg...}) or one of the
-- caller's shared functions by name ({name, key count, key..., arg...});
-- shared: those functions by name (each takes keys and args, as index_document does);
-- marks: nil, or {mark = value}, each mark starting with a NUL byte: every occurrence of a
-- mark in an argument is replaced by its value (a follow-up naming what the script itself
-- chose, such as the packet it claimed).

-- Copied element by element: unpack() stops at Lua's stack limit (about 8,000 values), and a
-- large document has that many postings.
local function slice(list, first, last)
  local part = {}
  for i = first, last do
    part[#part + 1] = list[i]
  end
  return part
end

local function marked(text, marks)
  if not string.find(text, '\0', 1, true) then
    return text  -- every mark starts with a NUL byte: most arguments have none
  end
  for mark, value in pairs(marks) do
    local first, last = string.find(text, mark, 1, true)
    while first do
      text = string.sub(text, 1, first - 1) .. value .. string.sub(text, last + 1)
      first, last = string.find(text, mark, first + #value, true)
    end
  end
  return text
end

local function run_one(command, shared, marks)
  if marks then
    for i = 1, #command do
      command[i] = marked(command[i], marks)
    end
  end
  local run = shared[command[1]]
  if run then
    local count = tonumber(command[2])
    run(slice(command, 3, 2 + count), slice(command, 3 + count, #command))
  else
    redis.call(unpack(command))
  end
end

-- An error raised by redis.call is a table ({err = ...}) since Redis 7, a string before.
local function error_text(failure)
  if type(failure) == 'table' then
    return tostring(failure.err)
  end
  return tostring(failure)
end

-- Runs every follow-up on its own, so one that fails (a key of the wrong type, no memory)
-- costs only itself. Returns the first failure's message, or nil when all of them ran.
local function run_follow_ups(packed, shared, marks)
  local unpacked, commands = pcall(cmsgpack.unpack, packed)
  if not unpacked then
    return error_text(commands)
  end
  local first_failure = nil
  for _, command in ipairs(commands) do
    local ran, failure = pcall(run_one, command, shared, marks)
    if not ran and not first_failure then
      first_failure = error_text(failure)
    end
  end
  return first_failure
end
