"""The wire types of LangGraph's checkpointer on Baton (``baton.agents.langgraph.BatonSaver``;
its operations are in ``baton.server.operations``).

Baton stores what LangGraph's serializer made of a checkpoint, its metadata and each write
(``Blob``: the serializer's type name and bytes) without decoding it: only the client
decodes. A checkpoint's metadata also travels as the JSON values it holds (``filters``), so
that listing filters on them here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from baton.server.model.models import Input, PageSize

MAX_BLOB_TYPE = 32
# BatonStore's items are the records under this scope, each version tagged so
# (baton.agents.langgraph; the expiry sweep writes their null versions the same way).
STORE_SCOPE = "langgraph"
STORE_TAG = "langgraph"
MAX_TTL_SECONDS = 10 * 365 * 86_400  # ten years
# A thread, checkpoint, task or run id, or a checkpoint namespace: text without NUL (Baton
# joins them with NUL in its keys).
Label = Annotated[str, msgspec.Meta(pattern="^[^\x00]*$")]
Id = Annotated[str, msgspec.Meta(min_length=1, pattern="^[^\x00]*$")]  # a checkpoint's id
Index = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class Blob(msgspec.Struct, forbid_unknown_fields=True):
    """A value as LangGraph's serializer typed it (``dumps_typed``): base64 on the wire."""

    type: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_BLOB_TYPE)]
    data: bytes


class Write(msgspec.Struct, forbid_unknown_fields=True):
    """One pending write of a task: its index among the task's writes (LangGraph's negative
    indexes name the special channels: error, interrupt, resume) and channel."""

    idx: Index
    channel: Label
    value: Blob


class PendingWrite(msgspec.Struct, kw_only=True):
    task_id: str
    task_path: str
    idx: int
    channel: str
    value: Blob


class StoredCheckpoint(msgspec.Struct, kw_only=True):
    """A checkpoint as stored, with its pending writes (in no order: the client sorts them
    as LangGraph does). ``hash`` chains it to its parent's (``parent_hash``)."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    checkpoint: Blob
    metadata: Blob
    writes: list[PendingWrite]
    created_at: str
    hash: str
    parent_hash: str | None


class CheckpointPage(msgspec.Struct, kw_only=True):
    """Checkpoints newest first (each namespace's; several namespaces one after another), and
    the cursor of the next page (None: no more)."""

    checkpoints: list[StoredCheckpoint]
    cursor: str | None = None


class CheckpointStored(msgspec.Struct, kw_only=True):
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    hash: str


class WritesStored(msgspec.Struct, kw_only=True):
    stored: int  # new ones: a regular write stored before is kept as it was


class CheckpointsRemoved(msgspec.Struct, kw_only=True):
    removed: int


class CheckpointsCopied(msgspec.Struct, kw_only=True):
    copied: int


class ThreadProblem(msgspec.Struct, kw_only=True):
    checkpoint_ns: str
    checkpoint_id: str
    problem: str


class ThreadVerified(msgspec.Struct, kw_only=True):
    """A thread's checkpoints checked against their hashes; ``detached``: those whose parent
    is gone (pruned, or deleted behind Baton's back)."""

    thread_id: str
    checkpoints: int
    ok: bool
    problems: list[ThreadProblem]
    detached: int


class PutCheckpointInput(Input, kw_only=True):
    thread_id: Label
    checkpoint_ns: Label = ""
    checkpoint_id: Id
    parent_id: Id | None = None
    checkpoint: Blob
    metadata: Blob
    filters: dict[str, Any] = {}
    run_id: Label | None = None


class PutWritesInput(Input, kw_only=True):
    thread_id: Label
    checkpoint_ns: Label = ""
    checkpoint_id: Id
    task_id: Label
    task_path: str = ""
    writes: list[Write]


class ListCheckpointsInput(Input, kw_only=True):
    """``checkpoint_ns`` None: every namespace of the thread; ``before``: only checkpoints
    older than that id; ``filter``: metadata values that must be equal."""

    thread_id: Label
    checkpoint_ns: Label | None = None
    checkpoint_id: Id | None = None
    before: Id | None = None
    filter: dict[str, Any] = {}
    limit: PageSize = 100
    cursor: str | None = None


class PruneThreadsInput(Input, kw_only=True):
    thread_ids: list[Label]
    strategy: Literal["keep_latest", "delete"] = "keep_latest"


class DeleteRunsInput(Input, kw_only=True):
    run_ids: list[Label]


class CopyThreadInput(Input, kw_only=True):
    source_thread_id: Label
    target_thread_id: Label


class VerifyThreadInput(Input, kw_only=True):
    thread_id: Label


class ItemExpiryInput(Input, kw_only=True):
    """``set`` (with ``ttl_seconds``), ``clear``, ``refresh`` or ``read`` the expiry of
    LangGraph store items, named by their records' refs."""

    refs: Annotated[list[str], msgspec.Meta(min_length=1, max_length=1000)]
    action: Literal["set", "clear", "refresh", "read"]
    ttl_seconds: Annotated[float, msgspec.Meta(gt=0, le=MAX_TTL_SECONDS)] | None = None


class ItemDeadlines(msgspec.Struct, kw_only=True):
    """Each ref's deadline after the change (ISO time; None: it does not expire)."""

    deadlines: dict[str, str | None]
