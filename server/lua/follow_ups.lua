-- A Lua function, not a script: no keys and no arguments of its own (needs index.lua and
-- touch.lua in front). Runs a batch of follow-up commands inside the script that decided
-- they should run, on one Redis only (their keys are not declared). packed: a msgpack list
-- of commands, each a plain command ({name, arg...}) or one of the shared functions by name
-- ({'index_doc' or 'touch_session', key count, key..., arg...}).

local shared = {index_doc = index_document, touch_session = touch_session}

-- Copied element by element: unpack() stops at Lua's stack limit (about 8,000 values), and a
-- large document has that many postings.
local function slice(list, first, last)
  local part = {}
  for i = first, last do
    part[#part + 1] = list[i]
  end
  return part
end

local function run_follow_ups(packed)
  for _, command in ipairs(cmsgpack.unpack(packed)) do
    local run = shared[command[1]]
    if run then
      local count = tonumber(command[2])
      run(slice(command, 3, 2 + count), slice(command, 3 + count, #command))
    else
      redis.call(unpack(command))
    end
  end
end

