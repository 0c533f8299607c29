-- A Lua function, not a script: no keys and no arguments of its own.
-- Shared by touch_session and remember. keys: the session hash, its touched hash, its log
-- of what it saw; args: agent, now (ISO), then ref/version pairs seen. Creates the session
-- on first use, reopens an abandoned one, records activity and what it saw: the version
-- last seen of each ref, and each sighting in the log ("now TAB ref TAB version", the
-- newest 10,000 kept). Returns the session's status.

local function touch_session(keys, args)
  redis.call('HSETNX', keys[1], 'agent', args[1])
  redis.call('HSETNX', keys[1], 'started_at', args[2])
  redis.call('HSETNX', keys[1], 'status', 'active')
  if redis.call('HGET', keys[1], 'status') == 'abandoned' then
    redis.call('HSET', keys[1], 'status', 'active')
  end
  redis.call('HSET', keys[1], 'last_activity_at', args[2])
  if #args > 2 then
    redis.call('HSET', keys[2], unpack(args, 3))
    for i = 3, #args, 2 do
      redis.call('RPUSH', keys[3], args[2] .. '\t' .. args[i] .. '\t' .. args[i + 1])
    end
    redis.call('LTRIM', keys[3], -10000, -1)
  end
  return redis.call('HGET', keys[1], 'status')
end

