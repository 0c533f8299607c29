"""Search: the lexical analysis (stemming, stopwords), BM25 in Redis, vectors beside it."""
