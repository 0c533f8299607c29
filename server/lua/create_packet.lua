-- KEYS[1] packet hash   KEYS[2] packet log   KEYS[3] inbox queued (or held)
-- KEYS[4] inbox expiring   KEYS[5] inbox all
-- ARGV[1] packet id     ARGV[2] created (µs)   ARGV[3] expires (µs) or ""
-- ARGV[4] created_at    ARGV[5] sender         ARGV[6] first state: queued or held
-- ARGV[7..] field/value pairs of the packet
-- A new packet in its inbox, on a cluster: the caller has taken the id and resolved the
-- pins (a field) before, and sends the inbox's registration and the event apart (their keys
-- are in other slots). Returns 1.
-- Runs after move.lua and store_packet.lua (the loader puts them in front).

store_packet(KEYS, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], {unpack(ARGV, 7)})
return 1
