"""Deleting a namespace's data: every key under its prefix that a dump carries (``baton
import --replace``), and with :func:`forget_namespace` the namespace itself (``baton
forget-namespace``): every key, its grants and LangGraph threads too, its agents' queues and
jobs, its place among the server's namespaces and among those its creator token may create.
What its versions counted against their agent tokens is given back either way.

Meant for a namespace nobody writes to any more: a write landing during the deletion may
leave keys behind (running it again removes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from baton.server.model.errors import NotFound
from baton.server.model.keys import NAMESPACES, is_version, token_namespaces_key
from baton.server.runtime import codec
from baton.server.stores.changes import Command
from baton.server.stores.token_bytes import refunds

if TYPE_CHECKING:
    from baton.server.stores.backend import Namespace

SCAN_COUNT = 1000


@dataclass(frozen=True)
class Removed:
    """What :func:`forget_namespace` deleted: keys of the namespace, jobs of its queues."""

    keys: int
    jobs: int


async def namespace_keys(
    ns: Namespace, *, threads: bool = False, settings: bool = False
) -> list[bytes]:
    """Every key under the namespace's prefix (all nodes of a cluster) but, unless
    ``settings``, its grants and webhooks (settings, not data, so a namespace replaced by an
    import stays as confined as it was, and its agents are still called)
    and, unless ``threads``, its LangGraph threads (a dump does not carry them: an import
    that replaces the namespace keeps them)."""
    grants, webhooks = ns.keys.grants.encode(), ns.keys.webhooks_stem.encode()
    thread_stem = ns.keys.threads.removesuffix("*").encode()
    return [
        key
        async for key in ns.redis.scan_iter(match=ns.keys.everything, count=SCAN_COUNT)
        if (settings or (key != grants and not key.startswith(webhooks)))
        and (threads or not key.startswith(thread_stem))
    ]


async def token_refunds(ns: Namespace, keys: Sequence[bytes]) -> list[Command]:
    """The commands that give back to each agent token the bytes its versions among
    ``keys`` hold (``baton.server.stores.token_bytes``)."""
    versions = [key for key in keys if is_version(ns.keys, key)]
    held: list[tuple[str | None, int]] = []
    for start in range(0, len(versions), SCAN_COUNT):
        batch = ns.batch()
        for key in versions[start : start + SCAN_COUNT]:
            batch.pipe.hget(key, "token")
            batch.pipe.hstrlen(key, "value")
        read = await batch.execute()
        held += [
            (codec.text(token), size) for token, size in zip(read[::2], read[1::2], strict=True)
        ]
    return refunds(held)


async def clear_namespace(ns: Namespace, *, threads: bool = False, settings: bool = False) -> int:
    """Delete every key of the namespace (:func:`namespace_keys`), giving its versions'
    bytes back to their tokens; how many keys."""
    keys = await namespace_keys(ns, threads=threads, settings=settings)
    given_back = await token_refunds(ns, keys)
    deleted = 0
    for start in range(0, len(keys), SCAN_COUNT):
        batch = ns.batch()
        for key in keys[start : start + SCAN_COUNT]:
            batch.pipe.delete(key)  # one key a command: a cluster's keys are in many slots
        deleted += sum(await batch.execute())
    batch = ns.batch()
    for command in given_back:
        batch.pipe.execute_command(command.name, command.key, *command.args)
    await batch.execute()
    return deleted


async def forget_namespace(ns: Namespace) -> Removed:
    """Delete the namespace: its keys (:func:`clear_namespace`), its agents' queues and
    their jobs, and its place in ``baton:namespaces`` and in the namespaces its creator
    token counts, so its slot of ``BATON_MAX_NAMESPACES`` and of that token's
    ``BATON_MAX_NAMESPACES_PER_TOKEN`` is free again. Other processes register it anew on
    their next write to it (``Namespace.admit``)."""
    agents = sorted(codec.text(agent) for agent in await ns.redis.smembers(ns.keys.inboxes))
    keys = await clear_namespace(ns, threads=True, settings=True)
    if not keys and not await ns.redis.sismember(NAMESPACES, ns.name):
        raise NotFound(f"no namespace {ns.name}: nothing was deleted")
    jobs = 0 if ns.dispatcher is None else await ns.dispatcher.forget_queues(ns.name, agents)
    creators = [
        key async for key in ns.redis.scan_iter(match=token_namespaces_key("*"), count=SCAN_COUNT)
    ]
    batch = ns.batch()
    for key in [NAMESPACES, *creators]:
        batch.pipe.srem(key, ns.name)
    await batch.execute()
    ns.backend.admitted.pop(ns.name, None)
    return Removed(keys, jobs)
