"""A demo run's namespace: a fresh one per run, deleted once the run passed."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime

from baton.server.maintenance.namespace_removal import forget_namespace
from baton.server.runtime.settings import Settings
from baton.server.stores.backend import open_backend


def fresh(prefix: str) -> str:
    """A namespace no earlier run used, e.g. ``demo-20261207-101500-ab12``."""
    return f"{prefix}-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def leave(redis_url: str, namespace: str, *, passed: bool) -> None:
    """Delete the run's namespace once it passed (``baton forget-namespace``); keep a
    failed run's for a look, and say how to delete it."""
    if not passed:
        print(f"namespace {namespace} kept; delete it with: baton forget-namespace {namespace}")
        return

    async def forget() -> None:
        async with open_backend(Settings(redis_url=redis_url)) as backend:
            await forget_namespace(backend.namespace(namespace))

    asyncio.run(forget())
