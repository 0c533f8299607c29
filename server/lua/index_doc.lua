-- KEYS[1] search docs hash   KEYS[2] search meta hash   KEYS[3] search stats hash
-- KEYS[4] the prefix of the term postings (same hash tag)
-- ARGV[1] doc id   ARGV[2] its entry (msgpack {kind, project, agent, len, terms}), or "" to
-- only remove the doc   ARGV[3] its meta ("kind\tproject\tagent")   ARGV[4] its length
-- ARGV[5..] term / posting score pairs
-- (Re)indexes one document in one call (index.lua): a document indexed again only moves
-- what changed. Returns 1 if the doc was indexed before, else 0.

return index_document(KEYS, ARGV)
