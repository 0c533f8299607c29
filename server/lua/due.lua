-- A Lua function, not a script: no keys and no arguments of its own.
-- Shared by expire_leases and expire_packets: calls visit(id, packet, log) for each
-- candidate still due at now in timed (a sorted set by time: a candidate renewed, settled
-- or requeued since the caller read it is left alone). The candidates' ids are ARGV from
-- first_id on; their packet hashes and logs are KEYS from first_key on, in pairs.

local function each_due(timed, now, first_key, first_id, visit)
  for i = first_id, #ARGV do
    local at = first_key + 2 * (i - first_id)
    local due = tonumber(redis.call('ZSCORE', timed, ARGV[i]) or '')
    if due and due <= now then
      visit(ARGV[i], KEYS[at], KEYS[at + 1])
    end
  end
end
