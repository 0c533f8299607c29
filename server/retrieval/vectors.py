"""Vectors beside BM25: each search document's text as a static embedding, and the documents
nearest a query by cosine similarity, for search to fuse with its BM25 ranking.

The model is WordLlama (``l2_supercat``, its first 64 dimensions), whose weights ship in its
PyPI wheel: nothing is downloaded at run time, and a short text embeds in about 0.1 ms. It
is optional: the ``vectors`` extra installs it with numpy; without it, or with
``BATON_VECTORS=off``, search is BM25 alone.

The index script keeps each document's vector in its namespace's vectors hash, set and
taken out with the document itself (save, supersede, update, forget, reindex), and names
every document it adds or takes out in the namespace's changes stream. Each process keeps a
copy of a namespace's vectors in memory (:class:`VectorCopy`): filled from the hash on its
first search, brought up to date from the stream before each search, filled again if it
fell further behind than the stream keeps. The copy holds each vector as int8 with a scale
(its largest component at ±127): 68 bytes a document, a quarter of float32, the cosine off
by about 0.002; similarity is computed a block of rows at a time in float32.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from baton.server.model.keys import Keys
from baton.server.runtime import codec

if TYPE_CHECKING:
    import numpy as np

MODEL = "wordllama l2_supercat"
DIMS = 64  # of the model's 256: Matryoshka-trained, the first 64 carry most of its meaning
CHANGES_READ = 1000  # changes-stream entries read per round trip
LOAD_BATCH = 1000  # vectors read per round trip when a copy is filled
# A search sorts the rows likely to hold its best WANTED_PER_HIT × limit first (the cut
# estimated from SAMPLE_SIZE rows, with SAMPLE_MARGIN to spare); the rest only if the
# filters need them. At a million rows this spares a partition of all of them (~8 ms).
WANTED_PER_HIT = 8
SAMPLE_SIZE = 8192
SAMPLE_MARGIN = 4
INLINE_ROWS = 20_000  # above this many vectors a search computes in a thread
LEVELS = 127  # a stored row's largest component becomes ±LEVELS (int8)
BLOCK_ROWS = 32_768  # rows converted to float32 at a time for the similarity
GROW_ROWS = 1024  # a copy grows by an eighth of its rows, at least this many


NOT_INSTALLED = "BATON_VECTORS=on needs the vectors extra: pip install 'baton-server[vectors]'"


class VectorsUnavailable(RuntimeError):
    """BATON_VECTORS=on, but the vectors extra (WordLlama) is not installed."""


class Embedder:
    """The model, loaded once per process from its wheel."""

    def __init__(self) -> None:
        try:
            import wordllama
            from threadpoolctl import threadpool_limits
            from wordllama import WordLlama
        except ImportError:
            raise VectorsUnavailable(NOT_INSTALLED) from None
        # The weights and tokenizer ship inside the package: point its cache there, never
        # at the network (its own resolver looks for the tokenizer in a folder the wheel
        # names otherwise).
        home = Path(wordllama.__file__).parent
        self.model = WordLlama.load(cache_dir=home, disable_download=True, trunc_dim=DIMS)
        # One BLAS thread: a search's product is small, and BLAS's own threads fight Redis
        # and the event loop for the cores (1M documents, the BM25 script beside the
        # vectors on 2 cores: 22.1 -> 12.3 ms).
        threadpool_limits(limits=1, user_api="blas")

    def embed(self, text: str) -> np.ndarray | None:
        """``text`` as a unit vector (float32), or None when it has nothing to embed."""
        import numpy as np

        vector = self.model.embed([text], norm=False)[0].astype(np.float32)
        length = float(np.linalg.norm(vector))
        return vector / length if length > 0 else None

    def encode(self, text: str) -> bytes:
        """``text`` as stored: its unit vector in float16 (b"" when it has none)."""
        vector = self.embed(text)
        return b"" if vector is None else vector.astype("<f2").tobytes()


class Near(NamedTuple):
    doc: str
    similarity: float
    kind: str
    project: str | None
    agent: str | None


@dataclass(eq=False)
class VectorCopy:
    """One process's copy of a namespace's vectors, with each document's kind, project and
    agent for the filters."""

    keys: Keys
    last: bytes | None = None  # the changes-stream entry the copy is up to (None: not filled)
    added: int = 0  # the stream's entries-added count at that entry
    docs: list[str | None] = field(default_factory=list)
    row_of: dict[str, int] = field(default_factory=dict)
    free: list[int] = field(default_factory=list)
    # rows × DIMS int8: each unit vector divided by its scale (zero rows are free)
    matrix: Any = None
    scales: Any = None  # rows float32: what a row's int8 values are multiplied by
    # each row's kind, project and agent as codes of ``names`` (0: none), for the filters
    fields: Any = None  # 3 × rows int32 (a field's codes side by side: fast masks)
    names: list[str] = field(default_factory=lambda: [""])
    code_of: dict[str, int] = field(default_factory=lambda: {"": 0})

    async def refresh(self, redis: Redis) -> None:
        """Bring the copy up to date: fill it the first time, or when changes it has not
        read were trimmed from the stream (or the stream started over: a namespace cleared
        by an import); else apply the changes since."""
        if self.last is None:
            await self._fill(redis)
            return
        while True:
            pipe = redis.pipeline(transaction=False)
            pipe.xinfo_stream(self.keys.search_changes)
            pipe.xrange(self.keys.search_changes, b"(" + self.last, "+", count=CHANGES_READ)
            info, entries = await pipe.execute(raise_on_error=False)
            if isinstance(info, ResponseError):  # no stream: nothing changed, or it was cleared
                if self.added:
                    await self._fill(redis)
                return
            added, length = int(info["entries-added"]), int(info["length"])
            if added < self.added or length < added - self.added:
                await self._fill(redis)
                return
            if isinstance(entries, Exception) or not entries:
                return
            self.last = _id_bytes(entries[-1][0])
            self.added += len(entries)
            changed = [codec.text(fields[b"doc"]) for _, fields in entries if fields]
            await self._read(redis, list(dict.fromkeys(changed)))
            if len(entries) < CHANGES_READ:
                return

    async def _fill(self, redis: Redis) -> None:
        import numpy as np

        try:  # where the stream is before the hash is read: later changes apply on top
            info = await redis.xinfo_stream(self.keys.search_changes)
            self.last, self.added = _id_bytes(info["last-generated-id"]), int(info["entries-added"])
        except ResponseError:
            self.last, self.added = b"0-0", 0
        self.docs, self.row_of, self.free = [], {}, []
        self.matrix = np.zeros((0, DIMS), dtype=np.int8)
        self.scales = np.zeros(0, dtype=np.float32)
        self.fields = np.zeros((3, 0), dtype=np.int32)
        self._reserve(await redis.hlen(self.keys.search_vectors))
        docs: list[str] = []
        async for doc, _ in redis.hscan_iter(self.keys.search_vectors, count=LOAD_BATCH):
            docs.append(codec.text(doc))
            if len(docs) == LOAD_BATCH:
                await self._read(redis, docs)
                docs = []
        await self._read(redis, docs)

    async def _read(self, redis: Redis, docs: list[str]) -> None:
        """Set each of ``docs`` to what the namespace holds now (or drop it)."""
        if not docs:
            return
        pipe = redis.pipeline(transaction=False)
        pipe.hmget(self.keys.search_vectors, docs)
        pipe.hmget(self.keys.search_meta, docs)
        vectors, metas = await pipe.execute()
        for doc, vector, meta in zip(docs, vectors, metas, strict=True):
            if vector and meta:
                self._put(doc, vector, codec.text(meta))
            else:
                self._drop(doc)

    def _put(self, doc: str, vector: bytes, meta: str) -> None:
        import numpy as np

        row = self.row_of.get(doc)
        if row is None:
            row = self.free.pop() if self.free else self._grow()
            self.row_of[doc] = row
            self.docs[row] = doc
        self.fields[:, row] = [self._code(name) for name in [*meta.split("\t"), "", ""][:3]]
        unit = np.frombuffer(vector, dtype="<f2").astype(np.float32)
        scale = float(np.abs(unit).max()) / LEVELS
        self.matrix[row] = np.rint(unit / scale) if scale > 0 else 0
        self.scales[row] = scale

    def _code(self, name: str) -> int:
        code = self.code_of.get(name)
        if code is None:
            code = self.code_of[name] = len(self.names)
            self.names.append(name)
        return code

    def _grow(self) -> int:
        row = len(self.docs)
        if row == len(self.matrix):
            self._reserve(row + max(GROW_ROWS, row // 8))
        self.docs.append(None)
        return row

    def _reserve(self, rows: int) -> None:
        """Room for ``rows`` rows in the arrays, keeping what they hold."""
        import numpy as np

        more = rows - len(self.matrix)
        if more > 0:
            self.matrix = np.concatenate([self.matrix, np.zeros((more, DIMS), np.int8)])
            self.scales = np.concatenate([self.scales, np.zeros(more, np.float32)])
            self.fields = np.concatenate([self.fields, np.zeros((3, more), np.int32)], axis=1)

    def _drop(self, doc: str) -> None:
        row = self.row_of.pop(doc, None)
        if row is not None:
            self.docs[row] = None
            self.fields[:, row] = 0
            self.matrix[row] = 0
            self.scales[row] = 0
            self.free.append(row)

    def nearest(
        self,
        query: np.ndarray,
        limit: int,
        floor: float,
        kinds: frozenset[str],
        project: str | None,
        agent: str | None,
    ) -> list[Near]:
        """The documents at least ``floor`` similar to ``query`` that the filters want
        (kind in ``kinds`` if given; of ``project`` or none; of ``agent`` or none), best
        first, at most ``limit``: the filters are masks over every row, then only the best
        are sorted."""

        import numpy as np

        rows = len(self.docs)
        if not rows:
            return []
        similarity = self._similarity(query, rows)
        if kinds or project or agent:
            kind_of, project_of, agent_of = self.fields[:, :rows]
            wanted = similarity >= floor
            if kinds:
                kind_wanted = np.zeros(rows, dtype=bool)
                for kind in kinds:
                    kind_wanted |= kind_of == self.code_of.get(kind, -1)
                wanted &= kind_wanted
            for name, of in ((project, project_of), (agent, agent_of)):
                if name:  # that one's, or no one's
                    wanted &= (of == 0) | (of == self.code_of.get(name, -1))
            similarity *= wanted  # 0 is below any floor (BATON_VECTOR_FLOOR is above 0)
        found: list[Near] = []
        for ranked in _best_first(similarity, floor, WANTED_PER_HIT * limit):
            for row in ranked[: limit - len(found)]:
                kind, doc_project, doc_agent = (self.names[code] for code in self.fields[:, row])
                doc = self.docs[row]
                assert doc is not None  # a free row is a zero vector: below any floor
                similar = float(similarity[row])
                found.append(Near(doc, similar, kind, doc_project or None, doc_agent or None))
            if len(found) == limit:
                break
        return found

    def _similarity(self, query: np.ndarray, rows: int) -> np.ndarray:
        """The cosine of ``query`` with each of the first ``rows`` rows (0 for free ones)."""
        import numpy as np

        similarity = np.empty(rows, dtype=np.float32)
        block = np.empty((min(rows, BLOCK_ROWS), DIMS), dtype=np.float32)
        for start in range(0, rows, BLOCK_ROWS):
            end = min(rows, start + BLOCK_ROWS)
            part = block[: end - start]
            part[...] = self.matrix[start:end]
            np.matmul(part, query, out=similarity[start:end])
        similarity *= self.scales[:rows]
        return similarity


class Vectors:
    """A process's vector search: its embedder and a copy of each namespace's vectors."""

    def __init__(self, floor: float) -> None:
        self.floor = floor
        self.copies: dict[str, VectorCopy] = {}
        self._embedder: Embedder | None = None

    @property
    def embedder(self) -> Embedder:
        """The model, loaded on first use (a command that never indexes or searches never
        pays for it)."""
        if self._embedder is None:
            self._embedder = Embedder()
        return self._embedder

    def encode(self, text: str) -> bytes:
        return self.embedder.encode(text)

    async def copy_of(self, redis: Redis, keys: Keys) -> VectorCopy:
        """The process's copy of a namespace's vectors, brought up to date."""
        copy = self.copies.setdefault(keys.base, VectorCopy(keys))
        await copy.refresh(redis)
        return copy

    async def nearest(
        self,
        copy: VectorCopy,
        query: str,
        limit: int,
        kinds: frozenset[str],
        project: str | None,
        agent: str | None,
    ) -> list[Near]:
        """The documents of ``copy`` nearest ``query`` (:meth:`VectorCopy.nearest`)."""
        vector = self.embedder.embed(query)
        if vector is None:
            return []
        if len(copy.docs) <= INLINE_ROWS:
            return copy.nearest(vector, limit, self.floor, kinds, project, agent)
        # numpy lets go of the GIL while it multiplies: the event loop serves meanwhile
        return await asyncio.to_thread(
            copy.nearest, vector, limit, self.floor, kinds, project, agent
        )


def _id_bytes(entry: object) -> bytes:
    """A stream entry id as bytes (redis-py types it loosely)."""
    return entry if isinstance(entry, bytes) else str(entry).encode()


def vectors_for(setting: str, floor: float) -> Vectors | None:
    """The process's vector search for ``BATON_VECTORS``: None when ``off``, or ``auto``
    without the vectors extra; ``VectorsUnavailable`` when ``on`` without it."""
    if setting == "off":
        return None
    if importlib.util.find_spec("wordllama") is None:
        if setting == "on":
            raise VectorsUnavailable(NOT_INSTALLED)
        return None
    return Vectors(floor)


def _best_first(similarity: np.ndarray, floor: float, wanted: int) -> Iterator[np.ndarray]:
    """The rows at least ``floor`` similar, best first, in two sorted tiers: those above a
    cut that about ``SAMPLE_MARGIN`` × ``wanted`` rows reach (estimated from an evenly spaced
    sample, so no pass over all rows sorts or partitions them), then, only if the caller
    reads on (its filters left it short), the rest."""
    import numpy as np

    cut = floor
    rows = len(similarity)
    if rows > SAMPLE_SIZE:
        sample = np.sort(similarity[:: rows // SAMPLE_SIZE])
        reached = min(len(sample), math.ceil(len(sample) * wanted * SAMPLE_MARGIN / rows))
        cut = max(floor, float(sample[-reached]))
    head = np.flatnonzero(similarity >= cut)
    yield head[np.argsort(-similarity[head], kind="stable")]
    if cut > floor:
        tail = np.flatnonzero((similarity >= floor) & (similarity < cut))
        yield tail[np.argsort(-similarity[tail], kind="stable")]
