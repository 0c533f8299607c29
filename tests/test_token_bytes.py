"""The value bytes each agent token stores (BATON_MAX_TOKEN_BYTES), on one Redis and a
cluster: counted by every write made with it, in every namespace, given back by a forget
(of a record or a whole namespace) to the token that wrote each version, refused at the
quota before anything is written."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from baton.server.maintenance.backup import export, import_dump
from baton.server.maintenance.namespace_removal import forget_namespace
from baton.server.model.errors import NotFound, QuotaReached
from baton.server.model.identity import REQUEST_CALLER, Caller, Credential
from baton.server.model.keys import TOKEN_BYTES, Keys
from baton.server.model.memory_models import ObserveInput
from baton.server.runtime.settings import Limits, Settings
from baton.server.stores.backend import Backend, open_backend

pytestmark = pytest.mark.anyio


@contextmanager
def acting_with(token_id: str, agent: str = "mallory") -> Iterator[None]:
    """Run as a request made with ``agent``'s agent token ``token_id``."""
    credential = Credential("token", agent=agent, token_id=token_id)
    reset = REQUEST_CALLER.set(Caller(agent, "default", None, credential))
    try:
        yield
    finally:
        REQUEST_CALLER.reset(reset)


@pytest.fixture
def acting() -> Iterator[None]:
    with acting_with("t-mallory"):
        yield


def stored_by(client: redis.Redis, token_id: str) -> int:
    return int(client.hget(TOKEN_BYTES, token_id) or 0)


def value_bytes(client: redis.Redis, namespace: str, ref: str, versions: int) -> int:
    keys = Keys(namespace)
    return sum(int(client.hstrlen(keys.version(ref, n), "value")) for n in range(1, versions + 1))


@pytest.mark.usefixtures("acting")
async def test_a_tokens_versions_count_against_it_until_forgotten(
    backend: Backend, data_redis: redis.Redis
) -> None:
    """Every version written with an agent token, records and memories, in any namespace,
    names the token and adds its value's bytes to the token's count; forgetting a memory
    takes its versions' bytes off again, once even when two forgets race."""
    default, other = backend.namespace("default"), backend.namespace("other")
    await default.records.remember("plan/a", "x" * 5000, agent="mallory")
    await default.records.remember("plan/a", "y" * 7000, agent="mallory")
    await other.records.remember("plan/b", {"z": "w" * 3000}, agent="mallory")
    saved = await default.memories.save("the deploy needs a migration first " * 300)
    memory_ref = f"memory/{saved.memory.id}"
    records = value_bytes(data_redis, "default", "plan/a", 2)
    records += value_bytes(data_redis, "other", "plan/b", 1)
    memory = value_bytes(data_redis, "default", memory_ref, 1)
    assert stored_by(data_redis, "t-mallory") == records + memory > 15_000
    assert data_redis.hget(Keys("default").version("plan/a", 2), "token") == b"t-mallory"

    caller = REQUEST_CALLER.get()
    forgets = await asyncio.gather(
        default.memories.forget(caller=caller, memory_id=saved.memory.id),
        default.memories.forget(caller=caller, memory_id=saved.memory.id),
        return_exceptions=True,
    )
    assert sum(isinstance(each, NotFound) for each in forgets) == 1, forgets
    assert stored_by(data_redis, "t-mallory") == records


async def test_operators_writes_count_against_no_token(
    backend: Backend, data_redis: redis.Redis
) -> None:
    """A write with no agent token (open mode, an admin token, the CLI) names none and
    counts against none, so it is never refused by a token's quota."""
    await backend.namespace("default").records.remember("ops/a", "x" * 5000, agent="ops")
    assert data_redis.hgetall(TOKEN_BYTES) == {}
    assert data_redis.hget(Keys("default").version("ops/a", 1), "token") is None


async def test_a_token_at_its_quota_is_refused_until_it_forgets(
    data_url: str, data_redis: redis.Redis
) -> None:
    """A token whose versions hold BATON_MAX_TOKEN_BYTES is refused its next write (413
    naming the setting, nothing written), in every namespace, while another token writes
    and its own hook events (which count no value bytes) are still taken; forgetting one of
    its memories gives it room again."""
    settings = Settings(redis_url=data_url, limits=Limits(max_token_bytes=20_000))
    async with open_backend(settings, dispatch=False) as backend:
        default, other = backend.namespace("default"), backend.namespace("other")
        with acting_with("t-mallory"):
            saved = await default.memories.save("a long memory about the deploy " * 400)
            await default.records.remember("plan/a", "x" * 9000, agent="mallory")
            for namespace in (default, other):
                with pytest.raises(QuotaReached, match="BATON_MAX_TOKEN_BYTES"):
                    await namespace.records.remember("plan/c", "small", agent="mallory")
            assert data_redis.exists(Keys("default").head("plan/c")) == 0
            observed = await default.sessions.observe(
                ObserveInput(
                    hook_type="post_tool_use",
                    session_id="s-mallory",
                    project="app",
                    cwd="/app",
                    timestamp="2026-12-07T10:00:00Z",
                    data={"tool_name": "Read", "tool_input": {"file_path": "a.py"}},
                ),
                caller=REQUEST_CALLER.get(),
            )
            assert not observed.deduplicated
        with acting_with("t-bob", "bob"):
            await other.records.remember("plan/d", "x" * 9000, agent="bob")
        with acting_with("t-mallory"):
            await default.memories.forget(caller=REQUEST_CALLER.get(), memory_id=saved.memory.id)
            await default.records.remember("plan/c", "small", agent="mallory")


@pytest.mark.usefixtures("acting")
async def test_deleting_a_namespace_gives_its_bytes_back(
    backend: Backend, data_redis: redis.Redis
) -> None:
    """``import --replace`` (its own transaction on one Redis) and ``forget-namespace``
    delete a namespace's versions and take their bytes off the tokens that wrote them;
    what the token stored elsewhere still counts."""
    kept, replaced, dropped = (backend.namespace(name) for name in ("kept", "replaced", "dropped"))
    for namespace in (kept, replaced, dropped):
        await namespace.records.remember("plan/a", "x" * 4000, agent="mallory")
    elsewhere = value_bytes(data_redis, "kept", "plan/a", 1)
    assert stored_by(data_redis, "t-mallory") == 3 * elsewhere
    await import_dump(replaced, [], atomic=True, replace=True)
    assert stored_by(data_redis, "t-mallory") == 2 * elsewhere
    await forget_namespace(dropped)
    assert stored_by(data_redis, "t-mallory") == elsewhere


@pytest.mark.usefixtures("acting")
async def test_what_a_forget_or_an_import_gave_back_is_never_given_back_twice(
    backend: Backend, data_redis: redis.Redis
) -> None:
    """A forgotten version's tombstone names no token (its bytes went back at the forget),
    so deleting its namespace later gives nothing back again; a dump carries no token, so
    ``import --merge`` gives back what the versions it replaces counted and charges none
    for the ones it writes (an operator's restore)."""
    ns = backend.namespace("once")
    saved = await ns.memories.save("a memory to forget about the release train " * 50)
    await ns.memories.forget(caller=REQUEST_CALLER.get(), memory_id=saved.memory.id)
    assert stored_by(data_redis, "t-mallory") == 0
    await forget_namespace(ns)
    assert stored_by(data_redis, "t-mallory") == 0

    ns = backend.namespace("merged")
    await ns.records.remember("plan/a", "x" * 3000, agent="mallory")
    dump = [json.loads(json.dumps(line)) async for line in export(ns)]
    assert all("token" not in version for version in dump[0]["versions"])
    await import_dump(ns, dump, atomic=True, merge=True)
    assert stored_by(data_redis, "t-mallory") == 0
    assert data_redis.hget(Keys("merged").version("plan/a", 1), "token") is None
