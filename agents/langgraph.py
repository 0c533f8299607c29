"""LangGraph on Baton (the ``langgraph`` extra; docs/langgraph.md): :class:`BatonSaver`, a
checkpointer whose threads live in Baton, reached over its REST API with one agent's
identity, as the AMFS adapter does.

    saver = BatonSaver("http://127.0.0.1:8765", agent="planner")
    graph = builder.compile(checkpointer=saver)

Each checkpoint is stored whole (its channel values with it), hash-chained to its parent's:
``saver.verify(thread_id)`` checks a thread's history. Baton stores what LangGraph's
serializer made of each value and never decodes it; only this client does.
"""

from __future__ import annotations

import asyncio
import contextlib
import string
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast
from weakref import WeakKeyDictionary

import msgspec
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.memory import InMemoryStore

from baton.agents.client import (
    AsyncBatonClient,
    BatonClient,
    ConflictError,
    InvalidInputError,
    NotFoundError,
)
from baton.server import operations as ops
from baton.server.model import thread_models as lg
from baton.server.model.models import RecordVersion
from baton.server.model.thread_models import (
    STORE_SCOPE,
    STORE_TAG,
    Blob,
    CheckpointPage,
    StoredCheckpoint,
    ThreadVerified,
)

PAGE = 100  # checkpoints asked for in one request while listing


def _json_values(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata's values that JSON carries unchanged (a tuple as a list, as LangGraph's
    serializer gives it back): the ones Baton filters listings on."""
    found = {}
    for key, value in metadata.items():
        try:  # and Baton stores (msgpack: integers of 64 bits)
            carried = msgspec.json.decode(msgspec.json.encode(value))
            if carried == _as_lists(value):
                msgspec.msgpack.encode(carried)
                found[key] = carried
        except (TypeError, OverflowError, msgspec.EncodeError):
            continue
    return found


def _as_lists(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_as_lists(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_lists(item) for key, item in value.items()}
    return value


class Pages:
    """The requests of one listing: pages of up to :data:`PAGE` until ``limit`` (None: all)
    checkpoints came or the server has no more."""

    def __init__(self, query: dict[str, Any], limit: int | None) -> None:
        self.query, self.left = query, limit
        self.cursor: str | None = None
        self.done = False

    def next(self) -> dict[str, Any] | None:
        """The next request's fields, or None when the listing is complete."""
        if self.done or (self.left is not None and self.left <= 0):
            return None
        size = PAGE if self.left is None else min(self.left, PAGE)
        return {**self.query, "limit": size, "cursor": self.cursor}

    def took(self, page: CheckpointPage) -> list[StoredCheckpoint]:
        """``page``'s checkpoints, noting where the next page starts."""
        if self.left is not None:
            self.left -= len(page.checkpoints)
        self.cursor, self.done = page.cursor, page.cursor is None
        return page.checkpoints


class BatonSaver(BaseCheckpointSaver[int]):
    """LangGraph's checkpointer on Baton: blocking methods through a :class:`BatonClient`,
    ``a…`` methods through an :class:`AsyncBatonClient`, both built from the same arguments
    (``agent``, ``namespace``, ``token``: as the clients take them). Close it with
    :meth:`close` / :meth:`aclose`."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8765",
        *,
        agent: str = "langgraph",
        namespace: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        options: dict[str, Any] = {
            "agent": agent,
            "namespace": namespace,
            "token": token,
            "timeout": timeout,
        }
        self.client = BatonClient(base_url, **options)
        self._base_url, self._options = base_url, options
        # an asyncio client per event loop: its connections belong to the loop they opened in
        self._aclients: WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncBatonClient] = (
            WeakKeyDictionary()
        )

    @property
    def aclient(self) -> AsyncBatonClient:
        """The asyncio client of the running event loop."""
        loop = asyncio.get_running_loop()
        if (found := self._aclients.get(loop)) is None:
            found = self._aclients[loop] = AsyncBatonClient(self._base_url, **self._options)
        return found

    def close(self) -> None:
        self.client.close()

    async def aclose(self) -> None:
        """Close the running event loop's asyncio client."""
        found = self._aclients.pop(asyncio.get_running_loop(), None)
        if found is not None:
            await found.aclose()

    # -- requests, built once for both clients ------------------------------------------------

    def _blob(self, value: Any) -> Blob:
        kind, data = self.serde.dumps_typed(value)
        return Blob(kind, data)

    def _value(self, blob: Blob) -> Any:
        return self.serde.loads_typed((blob.type, blob.data))

    def _put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> dict[str, Any]:
        configurable = config["configurable"]
        stored_metadata = get_checkpoint_metadata(config, metadata)
        run_id = stored_metadata.get("run_id")
        return {
            "thread_id": str(configurable["thread_id"]),
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "checkpoint_id": checkpoint["id"],
            "parent_id": configurable.get("checkpoint_id"),
            "checkpoint": self._blob(checkpoint),
            "metadata": self._blob(stored_metadata),
            "filters": _json_values(stored_metadata),
            "run_id": str(run_id) if run_id is not None else None,
        }

    def _writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> dict[str, Any]:
        configurable = config["configurable"]
        return {
            "thread_id": str(configurable["thread_id"]),
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "checkpoint_id": configurable["checkpoint_id"],
            "task_id": task_id,
            "task_path": task_path,
            "writes": [
                lg.Write(WRITES_IDX_MAP.get(channel, idx), channel, self._blob(value))
                for idx, (channel, value) in enumerate(writes)
            ],
        }

    def _query(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        *,
        latest: bool = False,
    ) -> dict[str, Any]:
        if config is None:
            raise ValueError(
                "BatonSaver lists one thread at a time: pass a config with a thread_id"
            )
        configurable = config["configurable"]
        wanted = _json_values(filter or {})
        if wanted.keys() != (filter or {}).keys():
            raise ValueError("BatonSaver filters on metadata values JSON can carry")
        return {
            "thread_id": str(configurable["thread_id"]),
            "checkpoint_ns": configurable.get("checkpoint_ns", "" if latest else None),
            "checkpoint_id": get_checkpoint_id(config),
            "before": get_checkpoint_id(before) if before else None,
            "filter": wanted,
        }

    def _tuple(self, stored: StoredCheckpoint) -> CheckpointTuple:
        def config(checkpoint_id: str) -> RunnableConfig:
            return {
                "configurable": {
                    "thread_id": stored.thread_id,
                    "checkpoint_ns": stored.checkpoint_ns,
                    "checkpoint_id": checkpoint_id,
                }
            }

        writes = sorted(
            stored.writes, key=lambda write: (write.task_path, write.task_id, write.idx)
        )
        return CheckpointTuple(
            config=config(stored.checkpoint_id),
            checkpoint=self._value(stored.checkpoint),
            metadata=self._value(stored.metadata),
            parent_config=config(stored.parent_id) if stored.parent_id else None,
            pending_writes=[
                (write.task_id, write.channel, self._value(write.value)) for write in writes
            ],
        )

    @staticmethod
    def _prune(thread_ids: Sequence[str], strategy: str) -> dict[str, Any]:
        return {"thread_ids": [str(thread_id) for thread_id in thread_ids], "strategy": strategy}

    # -- blocking ----------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        query = self._query(config, None, None, latest=True)
        page = self.client.perform(ops.LIST_CHECKPOINTS, **query, limit=1)
        return self._tuple(page.checkpoints[0]) if page.checkpoints else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        pages = Pages(self._query(config, filter, before), limit)
        while (fields := pages.next()) is not None:
            page = self.client.perform(ops.LIST_CHECKPOINTS, **fields)
            yield from map(self._tuple, pages.took(page))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        stored = self.client.perform(ops.PUT_CHECKPOINT, **self._put(config, checkpoint, metadata))
        return _config_of(stored)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.client.perform(ops.PUT_WRITES, **self._writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self.client.perform(ops.PRUNE_THREADS, **self._prune([thread_id], "delete"))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.client.perform(ops.DELETE_RUNS, run_ids=[str(run) for run in run_ids])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.client.perform(
            ops.COPY_THREAD,
            source_thread_id=str(source_thread_id),
            target_thread_id=str(target_thread_id),
        )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Raises NotImplementedError, as LangGraph's Postgres saver does, for ``keep_latest``
        on a thread that uses a DeltaChannel (nothing is pruned then)."""
        with _delta_refusal():
            self.client.perform(ops.PRUNE_THREADS, **self._prune(thread_ids, strategy))

    def verify(self, thread_id: str) -> ThreadVerified:
        """Check every checkpoint of the thread against its hash and its parent's."""
        return self.client.perform(ops.VERIFY_THREAD, thread_id=str(thread_id))

    # -- asyncio -----------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        query = self._query(config, None, None, latest=True)
        page = await self.aclient.perform(ops.LIST_CHECKPOINTS, **query, limit=1)
        return self._tuple(page.checkpoints[0]) if page.checkpoints else None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        pages = Pages(self._query(config, filter, before), limit)
        while (fields := pages.next()) is not None:
            page = await self.aclient.perform(ops.LIST_CHECKPOINTS, **fields)
            for stored in pages.took(page):
                yield self._tuple(stored)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        fields = self._put(config, checkpoint, metadata)
        return _config_of(await self.aclient.perform(ops.PUT_CHECKPOINT, **fields))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        fields = self._writes(config, writes, task_id, task_path)
        await self.aclient.perform(ops.PUT_WRITES, **fields)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.aclient.perform(ops.PRUNE_THREADS, **self._prune([thread_id], "delete"))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.aclient.perform(ops.DELETE_RUNS, run_ids=[str(run) for run in run_ids])

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.aclient.perform(
            ops.COPY_THREAD,
            source_thread_id=str(source_thread_id),
            target_thread_id=str(target_thread_id),
        )

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        with _delta_refusal():
            await self.aclient.perform(ops.PRUNE_THREADS, **self._prune(thread_ids, strategy))

    async def averify(self, thread_id: str) -> ThreadVerified:
        return await self.aclient.perform(ops.VERIFY_THREAD, thread_id=str(thread_id))


@contextlib.contextmanager
def _delta_refusal() -> Iterator[None]:
    """Baton's 409 for a DeltaChannel thread as the NotImplementedError LangGraph's savers
    raise for it."""
    try:
        yield
    except ConflictError as refused:
        raise NotImplementedError(refused.detail) from refused


def _config_of(stored: lg.CheckpointStored) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": stored.thread_id,
            "checkpoint_ns": stored.checkpoint_ns,
            "checkpoint_id": stored.checkpoint_id,
        }
    }


# -- the store ------------------------------------------------------------------------------

CREATED = "created:"  # a tag: when the item was first put (its versions after the first)
SAFE = frozenset(string.ascii_letters + string.digits + "_-:@")
MAX_REF = 512  # Baton's limit on a ref (BATON_MAX_REF_LENGTH)
RECORD_PAGE = 500  # records asked for in one request (less where the server says so)
QUERY_CHARACTERS = 2000  # of a query, the part Baton's search ranks by
MAX_PUT_ATTEMPTS = 100  # a put read-and-written again when another writer got in between
EXPIRY_BATCH = 1000  # refs in one expiry request (the server's bound)


class TooLongForBaton(ValueError):
    """A namespace and key whose ref, once escaped, is past Baton's limit on refs."""


def _segment(text: str) -> str:
    """``text`` as one segment of a ref: letters, digits and ``_ - : @`` as they are, every
    other character as ``+HH`` per UTF-8 byte (a lone surrogate too), and the empty text as
    a lone ``+``."""
    if not text:
        return "+"
    return "".join(
        char
        if char in SAFE
        else "".join(f"+{b:02X}" for b in char.encode("utf-8", "surrogatepass"))
        for char in text
    )


def _text(segment: str) -> str:
    """:func:`_segment`'s inverse; ValueError for a segment it did not write."""
    if segment == "+":
        return ""
    raw, at = bytearray(), 0
    while at < len(segment):
        if segment[at] == "+":
            raw.append(int(segment[at + 1 : at + 3], 16))
            at += 3
        else:
            raw += segment[at].encode()
            at += 1
    return raw.decode("utf-8", "surrogatepass")


def item_ref(namespace: tuple[str, ...], key: str) -> str:
    """The ref of the record that holds one item of a :class:`BatonStore`;
    :class:`TooLongForBaton` past Baton's 512 characters."""
    ref = "/".join((STORE_SCOPE, *map(_segment, namespace), _segment(key)))
    if len(ref) > MAX_REF:
        raise TooLongForBaton(
            f"namespace {namespace!r} and key {key[:40]!r}… make a Baton ref of {len(ref)} "
            f"characters, past its {MAX_REF} (every character but letters, digits and "
            "_ - : @ takes 3 per UTF-8 byte)"
        )
    return ref


def _scope(namespace_prefix: tuple[str, ...]) -> str:
    return "/".join((STORE_SCOPE, *map(_segment, namespace_prefix)))


def _item(record: RecordVersion) -> Item | None:
    """The item a record holds (None: deleted, or a record the store did not write)."""
    if not isinstance(record.value, dict):
        return None
    try:
        *labels, key = (_text(segment) for segment in record.ref.split("/")[1:])
    except ValueError:  # UnicodeDecodeError too
        return None
    created = next((tag[len(CREATED) :] for tag in record.tags if tag.startswith(CREATED)), None)
    return Item(
        value=record.value,
        key=key,
        namespace=tuple(labels),
        created_at=datetime.fromisoformat(created or record.created_at),
        updated_at=datetime.fromisoformat(record.created_at),
    )


class BatonStore(BaseStore):
    """LangGraph's long-term memory store on Baton: each item is a Baton record
    (:func:`item_ref`), every put a new hash-chained version another agent can read, pin
    in a handoff or verify; a delete is a version with no value (a forgotten record could
    not be written again). The ``a…`` methods run the blocking ones in a thread.

    As LangGraph's own stores, a batch answers its reads from the store as it was before
    the batch, and then writes its puts (the last for an item wins). Search reads the items
    under the namespace prefix and filters them as LangGraph's ``InMemoryStore`` does (its
    own code does the filtering); without a query the most recently updated come first,
    with one Baton's search (BM25) ranks the items that match it first.
    ``list_namespaces`` names namespaces that hold an item.

    A ``ttl`` puts an expiry beside the item's record (``baton.server.stores.item_expiry``); with
    a ``ttl`` config (LangGraph's ``TTLConfig``) reads refresh it and, with
    ``omit_expired``, leave out items past it; Baton's sweep deletes them."""

    __slots__ = ("client", "page", "ttl_config")
    supports_ttl = True

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8765",
        *,
        agent: str = "langgraph",
        namespace: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        ttl: TTLConfig | None = None,
    ) -> None:
        self.client = BatonClient(
            base_url, agent=agent, namespace=namespace, token=token, timeout=timeout
        )
        self.page = RECORD_PAGE
        self.ttl_config = ttl

    def close(self) -> None:
        self.client.close()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        results = [None if isinstance(op, PutOp) else self._read(op) for op in ops]
        puts = {(op.namespace, op.key): op for op in ops if isinstance(op, PutOp)}
        for put in puts.values():
            self._put(put)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _read(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            item = self._get(op.namespace, op.key)
            kept = [] if item is None else self._unexpired([item])
            self._refresh(kept, op.refresh_ttl)
            return kept[0] if kept else None
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise TypeError(f"BatonStore does not know the operation {type(op).__name__}")

    def _expiry(
        self, refs: list[str], action: str, seconds: float | None = None
    ) -> dict[str, str | None]:
        """Each ref's deadline after ``action`` (``baton.server.stores.item_expiry``)."""
        deadlines: dict[str, str | None] = {}
        for start in range(0, len(refs), EXPIRY_BATCH):
            answer = self.client.perform(
                ops.ITEM_EXPIRY,
                refs=refs[start : start + EXPIRY_BATCH],
                action=action,
                ttl_seconds=seconds,
            )
            deadlines |= answer.deadlines
        return deadlines

    def _unexpired(self, items: list[Item]) -> list[Item]:
        """``items`` but those whose ttl ran out, with a ttl config that omits them before
        Baton's sweep deletes them (``omit_expired``)."""
        if not items or not (self.ttl_config or {}).get("omit_expired"):
            return items
        now = datetime.now(UTC)
        deadlines = self._expiry([item_ref(i.namespace, i.key) for i in items], "read")
        return [
            item
            for item in items
            if (deadline := deadlines[item_ref(item.namespace, item.key)]) is None
            or datetime.fromisoformat(deadline) > now
        ]

    def _refresh(self, items: list[Item], refresh: bool) -> None:
        """Start the ttl of the items read again, for a store with a ttl config."""
        if refresh and items and self.ttl_config is not None:
            self._expiry([item_ref(item.namespace, item.key) for item in items], "refresh")

    def _current(self, namespace: tuple[str, ...], key: str) -> RecordVersion | None:
        try:
            return self.client.recall(item_ref(namespace, key))
        except (NotFoundError, TooLongForBaton):  # too long: no such item can be stored
            return None

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        record = self._current(namespace, key)
        return None if record is None else _item(record)

    def _put(self, op: PutOp) -> None:
        """One version, written on the version read (another writer in between: read again),
        so that the item's creation time is the one its first version had."""
        if op.value is not None and not isinstance(op.value, dict):
            raise TypeError(f"BatonStore stores dict values, not {type(op.value).__name__}")
        for _ in range(MAX_PUT_ATTEMPTS):
            current = self._current(op.namespace, op.key)
            item = None if current is None else _item(current)
            if op.value is None and item is None:
                return
            tags = [STORE_TAG]
            if op.value is not None and item is not None:
                tags.append(CREATED + item.created_at.isoformat())
            try:
                self.client.remember(
                    item_ref(op.namespace, op.key),
                    op.value,
                    tags=tags,
                    expected_version=0 if current is None else current.version,
                )
            except ConflictError as moved:
                if "current_version" not in moved.problem:  # not a race: forgotten
                    raise
                continue
            if op.value is not None and op.ttl is not None:
                self._expiry([item_ref(op.namespace, op.key)], "set", op.ttl * 60)
            elif op.value is not None and self.ttl_config is not None:
                self._expiry([item_ref(op.namespace, op.key)], "clear")
            return
        raise ConflictError(409, {"detail": f"{op.namespace}/{op.key} kept moving"})

    def _records(self, scope: str, query: str | None) -> Iterator[RecordVersion]:
        """Every current record in ``scope`` (with ``query``: those Baton's search ranks),
        in pages of the size the server takes."""
        cursor = None
        while True:
            try:
                page = self.client.list_records(
                    scope=scope, query=query, limit=self.page, cursor=cursor
                )
            except InvalidInputError as refused:
                if refused.problem.get("field") != "limit" or "maximum" not in refused.problem:
                    raise
                self.page = int(refused.problem["maximum"])
                continue
            yield from page.records
            if (cursor := page.next_cursor) is None:
                return

    def _items(self, namespace_prefix: tuple[str, ...], query: str | None = None) -> list[Item]:
        """Every item under the prefix, most recently updated first (with ``query``: in the
        order Baton's search ranks them, the ones it does not match last)."""
        scope = _scope(namespace_prefix)
        if len(scope) > MAX_REF:
            return []
        found = {
            (item.namespace, item.key): item
            for item in map(_item, self._records(scope, None))
            if item is not None
        }
        ordered = sorted(found.values(), key=lambda item: item.updated_at, reverse=True)
        if not query or not query.strip():
            return ordered
        ranked = [
            found.pop((item.namespace, item.key))
            for item in map(_item, self._records(scope, query[:QUERY_CHARACTERS]))
            if item is not None and (item.namespace, item.key) in found
        ]
        return ranked + [item for item in ordered if (item.namespace, item.key) in found]

    def _search(self, op: SearchOp) -> list[SearchItem]:
        items = self._items(op.namespace_prefix, op.query)
        if op.filter:
            matching = _matching(items, op.namespace_prefix, op.filter)
            items = [item for item in items if (item.namespace, item.key) in matching]
        shown = self._unexpired(items)[op.offset : op.offset + op.limit]
        self._refresh(shown, op.refresh_ttl)
        return [
            SearchItem(
                namespace=item.namespace,
                key=item.key,
                value=item.value,
                created_at=item.created_at,
                updated_at=item.updated_at,
            )
            for item in shown
        ]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        """Read where the prefix condition (without wildcards) says, else everywhere."""
        prefix = next(
            (
                c.path
                for c in op.match_conditions or ()
                if c.match_type == "prefix" and "*" not in c.path
            ),
            (),
        )
        return cast(list[tuple[str, ...]], _in_memory(self._items(tuple(prefix))).batch([op])[0])


def _in_memory(items: list[Item]) -> InMemoryStore:
    """LangGraph's own store holding ``items``: its code decides what a filter or a
    namespace condition matches, so Baton's answers are LangGraph's."""
    store = InMemoryStore()
    store.batch([PutOp(item.namespace, item.key, item.value) for item in items])
    return store


def _matching(
    items: list[Item], prefix: tuple[str, ...], wanted: dict[str, Any]
) -> set[tuple[tuple[str, ...], str]]:
    found = _in_memory(items).search(prefix, filter=wanted, limit=len(items) or 1)
    return {(item.namespace, item.key) for item in found}
