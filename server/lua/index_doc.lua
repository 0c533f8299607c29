-- KEYS[1] search docs hash   KEYS[2] search meta hash   KEYS[3] search stats hash
-- KEYS[4] search vectors hash   KEYS[5] search changes stream
-- KEYS[6..] the postings of the terms ARGV names, in their order (same hash tag)
-- ARGV[1] doc id   ARGV[2] its entry (msgpack {kind, project, agent, len, terms}), or "" to
-- only remove the doc   ARGV[3] its meta ("kind\tproject\tagent\tadded")   ARGV[4] its length
-- ARGV[5] its vector ("" for none)   ARGV[6] how many terms it has (N)
-- ARGV[7..6+2N] term / count-in-the-doc pairs
-- ARGV[7+2N..] the terms of the further postings given (those it had when last indexed)
-- (Re)indexes one document in one call (index.lua): a document indexed again only moves
-- what changed. Returns {1} if the doc was indexed before, {0} if not, or, writing nothing,
-- {-1, term, ...}: the terms it was indexed with whose postings were not given.

local refused = refused_postings(KEYS, ARGV, -1)
if refused then
  return refused
end
return {index_document(KEYS, ARGV)}
