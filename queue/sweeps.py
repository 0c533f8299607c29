"""The periodic sweeps, shared by ``baton serve`` (a task in the API process) and
``baton worker`` (a job its timer enqueues): expire leases and packets, repair missing jobs,
mark idle sessions abandoned, forget memories whose ttl ran out, take a signed checkpoint
when due, recount a namespace's quota counts once (``baton.server.stores.recount``).

A Redis lock makes one sweep run at a time across every API replica and worker, so running
several of them never double-runs a sweep; whoever finds the lock taken skips that round.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from baton.server.maintenance.checkpoints import (
    CheckpointStore,
    SeenCheckpoints,
    take_checkpoint_if_due,
)
from baton.server.model.errors import describe
from baton.server.model.keys import NAMESPACES, SWEEP_LOCK
from baton.server.runtime import codec
from baton.server.runtime.settings import Settings
from baton.server.stores.backend import Backend
from baton.server.stores.recount import COUNTED, recount_once

log = structlog.get_logger("baton.sweep")


async def sweep_namespace(
    backend: Backend, namespace: str, settings: Settings, signing_key: Ed25519PrivateKey
) -> dict[str, Any]:
    ns = backend.namespace(namespace)
    abandoned = await ns.sessions.abandon_idle(settings.session_idle_seconds)
    forgotten = await ns.memories.expire()
    expired_items = await ns.item_expiry.expire()
    report = await ns.handoffs.sweep()
    checkpoint = await take_checkpoint_if_due(
        CheckpointStore(ns, signing_key, SeenCheckpoints.of(settings.data_dir)),
        settings.checkpoint_seconds,
    )
    if (
        abandoned
        or forgotten
        or expired_items
        or report.requeued
        or report.failed
        or report.expired
        or report.repaired
        or checkpoint
    ):
        log.info(
            "sweep",
            namespace=namespace,
            abandoned=abandoned,
            forgotten=forgotten,
            expired_items=expired_items,
            requeued=report.requeued,
            failed=report.failed,
            expired=report.expired,
            repaired=report.repaired,
            checkpoint=None if checkpoint is None else checkpoint.seq,
        )
    return {
        "requeued": len(report.requeued),
        "failed": len(report.failed),
        "expired": len(report.expired),
        "repaired": len(report.repaired),
        "abandoned": len(abandoned),
        "forgotten": len(forgotten),
        "expired_items": len(expired_items),
        "checkpoint": None if checkpoint is None else checkpoint.seq,
    }


async def sweep_all(
    backend: Backend, settings: Settings, signing_key: Ed25519PrivateKey
) -> dict[str, Any] | None:
    """One sweep of every namespace, unless another process holds the sweep lock (None). A
    namespace whose sweep fails is logged and reported with its error; the others are
    swept. Then, past the lock, one namespace not yet recounted has its quota counts
    recounted (``baton.server.stores.recount``)."""
    token = secrets.token_hex(8)
    lease = max(60, int(settings.handoffs.sweep_seconds * 10))
    if not await backend.redis.set(SWEEP_LOCK, token, nx=True, ex=lease):
        return None
    swept: dict[str, Any] = {}
    try:
        members = await backend.redis.smembers(NAMESPACES)
        for namespace in sorted(codec.text(raw) for raw in members):
            try:
                swept[namespace] = await sweep_namespace(backend, namespace, settings, signing_key)
            except (RedisConnectionError, RedisTimeoutError):
                raise  # Redis is away: the round fails as a whole, and is tried again
            except Exception as error:  # one namespace's fault never stops the others' sweep
                log.exception("sweep of a namespace failed", namespace=namespace)
                swept[namespace] = {"error": describe(error)}
    finally:
        await backend.scripts.release_lock(keys=[SWEEP_LOCK], args=[token])
    await recount_one(backend, list(swept), swept)
    return swept


async def recount_one(backend: Backend, namespaces: list[str], swept: dict[str, Any]) -> None:
    """Recount the quota counts of the first of ``namespaces`` never recounted, noting what
    it found in ``swept``; a failure is logged (the next round tries again)."""
    pipe = backend.redis.pipeline(transaction=False)
    for namespace in namespaces:
        pipe.hexists(backend.namespace(namespace).keys.search_stats, COUNTED)
    for namespace, counted in zip(namespaces, await pipe.execute(), strict=True):
        if counted:
            continue
        try:
            found = await recount_once(backend.namespace(namespace))
        except (RedisConnectionError, RedisTimeoutError):
            raise
        except Exception:
            log.exception("recount of a namespace's quota counts failed", namespace=namespace)
            return
        if found is not None:
            log.info("quota counts recounted", namespace=namespace, bytes=found[0], terms=found[1])
            swept[namespace]["recounted"] = found
        return


async def sweep_forever(
    backend: Backend, settings: Settings, signing_key: Ed25519PrivateKey
) -> None:
    """``baton serve``'s sweeper: a sweep every ``BATON_SWEEP_SECONDS``; a failed round (Redis
    away, say) is logged and the next one tried."""
    while True:
        await asyncio.sleep(settings.handoffs.sweep_seconds)
        try:
            await sweep_all(backend, settings, signing_key)
        except Exception:
            log.exception("sweep failed; trying again next round")
