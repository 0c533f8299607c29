"""A text's analysis for search (its terms counted, and its vector), bounded, and off the
event loop when the text is long.

Tokenizing and embedding are CPU work: a 1 MB value of distinct words takes about 0.8 s to
tokenize and 1.6 s to embed, during which a process's event loop would answer nobody. So:

- what one text gives the index is bounded: its first :data:`MAX_DOCUMENT_TERMS` distinct
  terms within its first :data:`MAX_DOCUMENT_CHARS` characters (tokenizing stops there,
  and the index script's work per document is bounded by it), and its first
  :data:`VECTOR_CHARS` characters embedded;
- a text longer than :data:`INLINE_CHARS` is analysed in a process of its own (one per
  Baton process, started on first use). A thread would not do: the tokenizer holds the GIL,
  and the event loop then waits up to a switch interval (5 ms) at every turn.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import jsonpatch
import msgspec
import structlog

from baton.server.retrieval import lexical

if TYPE_CHECKING:
    from baton.server.retrieval.vectors import Embedder, Vectors

T = TypeVar("T")
log = structlog.get_logger("baton.analysis")

# Distinct terms one document (or query) is analysed on, in the order they appear. A
# paragraph has a few hundred; the index script's work grows with them (about 10 µs each).
MAX_DOCUMENT_TERMS = 512
# Characters of one document analysed: a long run of a few words repeated never reaches
# MAX_DOCUMENT_TERMS, and this bounds it (about 50 ms of tokenizing).
MAX_DOCUMENT_CHARS = 64 * 1024
VECTOR_CHARS = 8192  # characters of a text embedded (one vector sums up its start)
INLINE_CHARS = 2048  # texts up to this long are analysed on the event loop (about 2 ms)
# A stale pin's JSON Patch: up to this many bytes of JSON (both values) on the event loop,
# up to PATCH_BYTES in the analysis process (a shuffled 3,000-item list: about 0.2 s); past
# that none (both values are still given).
INLINE_PATCH_BYTES = 512
PATCH_BYTES = 16 * 1024


class Analysis(NamedTuple):
    """A text as the index takes it: each term with its count, the terms counted in all
    (the document's length), and its vector (b"" when none was asked for, or it has none)."""

    counts: dict[str, int]
    length: int
    vector: bytes


def counted(text: str) -> tuple[dict[str, int], int]:
    """``text``'s first :data:`MAX_DOCUMENT_TERMS` distinct terms, each with its count, and
    how many terms were counted."""
    counts: dict[str, int] = {}
    for term in lexical.terms_until(text[:MAX_DOCUMENT_CHARS], MAX_DOCUMENT_TERMS):
        counts[term] = counts.get(term, 0) + 1
    return counts, sum(counts.values())


def analyse(text: str, embed: bool) -> Analysis:
    """``text``'s analysis, in the analysis process (which loads its own vector model on
    its first vector)."""
    global _model
    counts, length = counted(text)
    if not embed:
        return Analysis(counts, length, b"")
    if _model is None:
        from baton.server.retrieval.vectors import Embedder

        _model = Embedder()
    return Analysis(counts, length, _model.encode(text[:VECTOR_CHARS]))


def term_set(text: str) -> frozenset[str]:
    """Every distinct term of ``text`` (dedupe's similarity reads them all)."""
    return frozenset(lexical.terms(text))


_model: Embedder | None = None


class Analyzer:
    """Texts analysed for a backend's search: short ones on the event loop, long ones in the
    process's analysis process (one for the whole process, started on first use and again
    if it dies; it ends with the process)."""

    def __init__(self, vectors: Vectors | None) -> None:
        self.vectors = vectors

    async def analyse(self, text: str) -> Analysis:
        """``text``'s terms, and its vector when the process has vectors."""
        if len(text) > INLINE_CHARS:
            return await _elsewhere(analyse, text, self.vectors is not None)
        counts, length = counted(text)
        vector = b"" if self.vectors is None else self.vectors.encode(text[:VECTOR_CHARS])
        return Analysis(counts, length, vector)

    async def patch(self, before: Any, after: Any) -> list[dict[str, Any]] | None:
        """The RFC 6902 JSON Patch from ``before`` to ``after`` (jsonpatch), worked out in
        the analysis process unless both are tiny (jsonpatch's list diff takes a tenth of a
        second at a few hundred items); None when they are over :data:`PATCH_BYTES` of
        JSON together (a 150,000-item list took it 26 s)."""
        size = len(msgspec.json.encode(before)) + len(msgspec.json.encode(after))
        if size > PATCH_BYTES:
            return None
        if size <= INLINE_PATCH_BYTES:
            return json_patch(before, after)
        return await _elsewhere(json_patch, before, after)

    async def term_set(self, text: str) -> frozenset[str]:
        if len(text) > INLINE_CHARS:
            return await _elsewhere(term_set, text)
        return term_set(text)


def json_patch(before: Any, after: Any) -> list[dict[str, Any]]:
    patch: list[dict[str, Any]] = jsonpatch.make_patch(before, after).patch
    return patch


_pool: Executor | None = None


def _end_with_parent() -> None:
    """In the analysis process: end as soon as the process that started it ends, however it
    ends (a SIGKILL runs none of its exit handlers), never left behind; and leave Ctrl-C to
    it (the terminal sends it to the whole process group)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_after, args=(parent.sentinel,), daemon=True).start()


def _exit_after(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(0)


async def _elsewhere(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` in the analysis process; on the event loop when that process cannot
    be had (it cannot start here, or died twice running this): slower for everyone else,
    never a failed write."""
    global _pool
    loop = asyncio.get_running_loop()
    for _ in range(2):
        pool = _pool
        try:
            if pool is None:
                # spawn: a fork would copy this process's threads and its open connections
                context = multiprocessing.get_context("spawn")
                pool = _pool = ProcessPoolExecutor(
                    1, mp_context=context, initializer=_end_with_parent
                )
            return await loop.run_in_executor(pool, work, *args)
        except BrokenProcessPool:  # it was killed (out of memory, a signal): a new one
            if _pool is pool:  # (unless another call made one already)
                _pool = None
        except (OSError, NotImplementedError) as error:  # no process can start here
            log.warning("the analysis process cannot start", error=str(error))
            break
    log.warning("analysing a long text on the event loop", characters=len(str(args[0])))
    return work(*args)
