"""The lexical layer: what a text's terms are, for documents, queries and dedupe alike."""

from __future__ import annotations

from baton.server.retrieval.lexical import STOPWORDS, terms


def test_a_compound_is_kept_whole_and_split_into_its_parts() -> None:
    """Paths, versions, dates and snake/kebab/camel case are found whole and by each part:
    a path by its file name and that name's stem, a version by its product, a timestamp by
    its year, an identifier by its words."""
    assert terms("src/payments/refund.py") == [
        "src/payments/refund.py",
        "src",
        "payment",
        "refund.py",
        "refund",
        "py",
    ]
    assert terms("macos-22") == ["macos-22", "maco", "22"]
    assert terms("2026-04-08T09:30") == ["2026-04-08t09", "2026", "04", "08t09", "30"]
    assert terms("getUserName") == ["getusername", "get", "user", "name"]
    assert terms("HTTPServer snake_case") == [
        "httpserver",
        "http",
        "server",
        "snake_case",
        "snake",
        "case",
    ]
    assert terms("KeyError: 'user_id'") == ["keyerror", "key", "error", "user_id", "user", "id"]


def test_stopwords_are_dropped_and_plain_words_stemmed() -> None:
    """English stopwords carry no topic and are dropped (also as a compound's part); plain
    words are stemmed with Snowball, so every form of a word finds the others; a compound
    whole and anything with a digit stay as written."""
    assert terms("Which was the one that shipped?") == ["one", "ship"]
    assert terms("ship ships shipping shipped") == ["ship"] * 4
    assert terms("the-end") == ["the-end", "end"]
    assert terms("arm64 v1.2.3") == ["arm64", "v1.2.3", "v1"]
    assert {"which", "was", "and", "the"} <= STOPWORDS


def test_cjk_text_becomes_character_pairs() -> None:
    """Chinese and Japanese written without spaces are indexed as overlapping character
    pairs, so a word inside a sentence is found, and a CJK-only query has terms."""
    sentence = terms("缓存失效了")
    assert sentence == ["缓存", "存失", "失效", "效了"]
    assert set(terms("失效")) <= set(sentence)
    assert terms("キャッシュ") == ["キャ", "ャッ", "ッシ", "シュ"]
    assert terms("Redis缓存") == ["redi", "缓存"]
    assert terms("缓") == ["缓"]


def test_text_is_normalised_before_it_is_split() -> None:
    """Full-width letters are plain letters (NFKC); accented letters are letters; single
    characters other than CJK are no terms."""
    assert terms("ＦＵＬＬ width") == ["full", "width"]
    assert terms("café a b 7") == ["café"]
