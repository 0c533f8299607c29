-- KEYS[1] session hash   KEYS[2] the session's touched hash   KEYS[3] its log of sightings
-- ARGV[1] agent          ARGV[2] now (ISO)      ARGV[3..] ref/version pairs seen
-- Creates the session on first use, reopens an abandoned one, records activity and what it
-- saw (touch.lua). Returns the session's status.

return touch_session(KEYS, ARGV)
