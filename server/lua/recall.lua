-- KEYS[1] record head hash   KEYS[2] the hash of version ARGV[1]
-- ARGV[1] the version wanted, or the one believed current when ARGV[2] is "current"
-- ARGV[2] "current" when the current version is wanted, else ""
-- Returns what read_version.lua returns.

return read_version(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
