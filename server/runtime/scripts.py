"""Lua scripts: each one is a single atomic change confined to one hash slot.

The scripts live in ``server/lua/*.lua``, each opening with the KEYS and ARGV it takes and
what it returns. sha256 is not available inside Redis Lua, so callers compute hashes in
Python from a snapshot of the record head and pass the version (or outcome count) they built
on; the script applies the change only if the head still matches, otherwise it reports the
head and the caller rebuilds and retries. Concurrent writers therefore never lose a version.
"""

from __future__ import annotations

import os
from functools import cache
from importlib import resources

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

# The shared functions (files of Lua functions) each script gets in front of its own source.
PRELUDES = {
    "create_packet": ("move", "store_packet"),
    "hand_off": ("move", "store_packet", "follow_ups"),
    "claim_packet": ("move", "follow_ups"),
    "settle_packet": ("move",),
    "send_held": ("move",),
    "expire_leases": ("move", "due"),
    "expire_packets": ("move", "due"),
    "index_doc": ("index",),
    "touch_session": ("touch",),
    "recall": ("read_version",),
    "forget_record": ("follow_ups", "index"),
    "recall_seen": ("read_version", "touch"),
    "remember": ("write_version", "index", "touch", "follow_ups"),
    "append_version": ("write_version",),
}


# BATON_LUA_KEY_CHECK=1 (the test suite sets it): every script first checks that each key a
# command of it touches was given in KEYS (Redis's COMMAND GETKEYS names a command's keys),
# and fails with UNDECLARED otherwise, even inside a follow-up's pcall. Slower; for tests.
KEY_CHECK_VARIABLE = "BATON_LUA_KEY_CHECK"


@cache
def lua_source(name: str) -> str:
    """The source of ``server/lua/<name>.lua``, with its shared functions in front (and the
    key check in front of all, when ``BATON_LUA_KEY_CHECK`` is 1)."""
    source = _read(name)
    preludes = "".join(_read(prelude) for prelude in PRELUDES.get(name, ()))
    check = _read("key_check") if os.environ.get(KEY_CHECK_VARIABLE) == "1" else ""
    return check + preludes + source


def _read(name: str) -> str:
    return resources.files("baton.server").joinpath("lua", f"{name}.lua").read_text()


class Scripts:
    """Every script Baton runs on its data Redis, registered once per client (redis-py
    reloads a script after NOSCRIPT)."""

    def __init__(self, redis: Redis) -> None:
        def register(name: str) -> AsyncScript:
            return redis.register_script(lua_source(name))

        self.remember = register("remember")
        self.append_version = register("append_version")
        self.recall = register("recall")
        self.recall_seen = register("recall_seen")
        self.record_outcome = register("record_outcome")
        self.touch_session = register("touch_session")
        self.forget_record = register("forget_record")
        self.forget_observations = register("forget_observations")
        self.search = register("search")
        self.index_doc = register("index_doc")
        self.create_packet = register("create_packet")
        self.hand_off = register("hand_off")
        self.claim_packet = register("claim_packet")
        self.renew_lease = register("renew_lease")
        self.settle_packet = register("settle_packet")
        self.send_held = register("send_held")
        self.expire_leases = register("expire_leases")
        self.expire_packets = register("expire_packets")
        self.release_lock = register("release_lock")
        self.admit_namespace = register("admit_namespace")
        self.record_snapshot = register("record_snapshot")
        self.open_mcp_session = register("open_mcp_session")
        self.touch_mcp_session = register("touch_mcp_session")
        self.put_checkpoints = register("put_checkpoints")
        self.put_writes = register("put_writes")
        self.read_checkpoints = register("read_checkpoints")
        self.drop_checkpoints = register("drop_checkpoints")
        self.item_expiry = register("item_expiry")

    async def load(self, redis: Redis) -> int:
        """Load every script not yet in Redis' cache (after a restart or SCRIPT FLUSH);
        returns how many scripts are ready."""
        scripts = [value for value in vars(self).values() if isinstance(value, AsyncScript)]
        for script in scripts:  # SCRIPT LOAD is idempotent (and reaches every cluster primary)
            await redis.script_load(script.script)
        return len(scripts)
