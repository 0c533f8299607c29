-- KEYS[1] record head hash
-- KEYS[2] prefix of the record's version keys (ends in ":v:")
-- ARGV[1] the version wanted, or "" for the current one
-- Returns {head fields, version fields}, {} for an unknown record, or {head fields, {}} for
-- an unknown version (read.lua).

return read_record(KEYS[1], KEYS[2], ARGV[1])
