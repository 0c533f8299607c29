-- KEYS[1..3] and ARGV[1..11]: see write_version.lua (the head, the new and current
-- versions; what the version holds and the head it was built on).
-- A write on a cluster: the version only (the listing entries go before it and what follows
-- it after, in round trips of their own: their keys are in other slots).
-- Returns {1, new_version, {contested, contested_base}} (see write_version); {0, current_version, current_hash} when the head is not the one
-- the caller built on, by number or by hash; {-1} when the record was forgotten.
-- Runs after write_version.lua (the loader puts it in front).

local refused = refused_head(KEYS, ARGV)
if refused then
  return refused
end
local new, contest = write_version(KEYS, ARGV)
return {1, new, contest}
