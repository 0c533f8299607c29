"""Baton's one lexical layer: the terms of a text, the same for the documents search indexes,
the queries it answers, dedupe's similarity and enrich's lookups.

- The text is NFKC-normalised (full-width letters and digits become plain ones) and
  lower-cased.
- A compound (letters and digits joined by ``/ . _ -``, or a camelCase word) is kept whole
  and split into its parts, level by level: ``src/payments/refund.py`` gives itself,
  ``src``, ``payments``, ``refund.py``, ``refund`` and ``py``; ``macos-22`` gives ``macos``;
  ``2026-04-08t09`` gives ``2026``; ``getUserName`` gives ``get``, ``user`` and ``name``.
- English stopwords are dropped, wherever they stand (:data:`STOPWORDS`).
- Plain words are stemmed with the Snowball English stemmer ("shipped" and "shipping" are
  "ship"); anything with a digit or a joining character is kept as it is.
- Chinese, Japanese and Korean text (no spaces between words) becomes overlapping pairs of
  characters, as Lucene's CJK analyzer does; a lone character is one term.
- Other terms shorter than two characters are dropped.

:data:`LEXICAL_VERSION` names these rules: an index records the version that built it, and
``baton reindex`` rebuilds one built by another.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

import Stemmer

LEXICAL_VERSION = 2  # 1: lower-case tokens with path characters and a light plural stemmer
MIN_TERM = 2  # characters a term needs (a CJK character is a term alone)

# Han, kana and Hangul: written without spaces between words.
CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
PIECE = re.compile(
    rf"(?P<cjk>[{CJK}]+)|(?P<word>[^\W_{CJK}](?:[^\W_{CJK}]|[/._-](?=[^\W_{CJK}]))*)"
)
JOINERS = ("/", r"[._-]")  # a compound is split at '/' first, then at '.', '_' and '-'
CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")  # camelCase parts
CAMEL_BOUNDARY = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")  # getUser, HTTPServer

# NLTK's English stopword list (the words that carry no topic in a search).
STOPWORDS = frozenset(
    """
    a about above after again against ain all am an and any are aren aren't as at be because
    been before being below between both but by can couldn couldn't d did didn didn't do does
    doesn doesn't doing don don't down during each few for from further had hadn hadn't has
    hasn hasn't have haven haven't having he her here hers herself him himself his how i if in
    into is isn isn't it it's its itself just ll m ma me mightn mightn't more most mustn
    mustn't my myself needn needn't no nor not now o of off on once only or other our ours
    ourselves out over own re s same shan shan't she she's should should've shouldn shouldn't
    so some such t than that that'll the their theirs them themselves then there these they
    this those through to too under until up ve very was wasn wasn't we were weren weren't what
    when where which while who whom why will with won won't wouldn wouldn't y you you'd you'll
    you're you've your yours yourself yourselves
    """.split()
)

_stemmer = Stemmer.Stemmer("english")


def terms(text: str) -> list[str]:
    """The terms of ``text``, in order, a compound's whole before its parts."""
    return list(_terms(text))


def terms_until(text: str, distinct: int) -> Iterator[str]:
    """The terms of ``text`` in order, up to its ``distinct``-th distinct term: the text is
    read no further."""
    seen: set[str] = set()
    for term in _terms(text):
        if term not in seen:
            if len(seen) == distinct:
                return
            seen.add(term)
        yield term


def _terms(text: str) -> Iterator[str]:
    for match in PIECE.finditer(unicodedata.normalize("NFKC", text)):
        if match["cjk"]:
            run = match["cjk"]
            yield from [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
        else:
            yield from _word_terms(match["word"])


def _word_terms(word: str) -> list[str]:
    """A word's terms: itself, and if it is a compound, each of its parts (deduplicated). A
    plain word is stemmed; a compound, whole, is kept as written."""
    kept = []
    for piece, compound in dict.fromkeys(_parts(word, 0)):
        lowered = piece.lower()
        if len(lowered) < MIN_TERM or lowered in STOPWORDS:
            continue
        plain = lowered.isalpha() and not compound
        kept.append(_stemmer.stemWord(lowered) if plain else lowered)
    return list(dict.fromkeys(kept))


def _parts(piece: str, level: int) -> list[tuple[str, bool]]:
    """``piece`` and its parts, each with whether it is a compound: split at the joiners of
    ``level`` and below, then at camelCase."""
    if level < len(JOINERS):
        split = [part for part in re.split(JOINERS[level], piece) if part]
        if len(split) == 1:
            return _parts(piece, level + 1)
        return [(piece, True), *(sub for part in split for sub in _parts(part, level + 1))]
    if CAMEL_BOUNDARY.search(piece):
        return [(piece, True), *((part, False) for part in CAMEL.findall(piece))]
    return [(piece, False)]
