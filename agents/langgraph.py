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
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any
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

from baton.agents.client import AsyncBatonClient, BatonClient
from baton.server import operations as ops
from baton.server import thread_models as lg
from baton.server.thread_models import Blob, CheckpointPage, StoredCheckpoint, ThreadVerified

PAGE = 100  # checkpoints asked for in one request while listing


def _json_values(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata's values that JSON carries unchanged: the ones Baton filters listings on."""
    found = {}
    for key, value in metadata.items():
        try:  # and Baton stores (msgpack: integers of 64 bits)
            if msgspec.json.decode(msgspec.json.encode(value)) == value:
                msgspec.msgpack.encode(value)
                found[key] = value
        except (TypeError, OverflowError, msgspec.EncodeError):
            continue
    return found


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
        wanted = dict(filter or {})
        if _json_values(wanted) != wanted:
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
        await self.aclient.perform(ops.PRUNE_THREADS, **self._prune(thread_ids, strategy))

    async def averify(self, thread_id: str) -> ThreadVerified:
        return await self.aclient.perform(ops.VERIFY_THREAD, thread_id=str(thread_id))


def _config_of(stored: lg.CheckpointStored) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": stored.thread_id,
            "checkpoint_ns": stored.checkpoint_ns,
            "checkpoint_id": stored.checkpoint_id,
        }
    }
