"""Lua scripts: each one is a single atomic change confined to one hash slot.

The scripts live in ``server/lua/*.lua``, each opening with the KEYS and ARGV it takes and
what it returns. sha256 is not available inside Redis Lua, so callers compute hashes in
Python from a snapshot of the record head and pass the version (or outcome count) they built
on; the script applies the change only if the head still matches, otherwise it reports the
head and the caller rebuilds and retries. Concurrent writers therefore never lose a version.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

# The shared functions (files of Lua functions) each script gets in front of its own source.
PRELUDES = {
    "create_packet": ("move", "commands", "follow_ups"),
    "run_commands": ("commands",),
    "claim_packet": ("move", "discard", "follow_ups"),
    "settle_packet": ("move",),
    "expire_leases": ("move",),
    "expire_packets": ("move",),
    "index_doc": ("index",),
    "touch_session": ("touch",),
    "remember": ("index", "touch", "follow_ups"),
    "discard_job": ("discard",),
}


@cache
def lua_source(name: str) -> str:
    """The source of ``server/lua/<name>.lua``, with its shared functions in front."""
    source = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text()
    return "".join(lua_source(prelude) for prelude in PRELUDES.get(name, ())) + source


class Scripts:
    """Every script Baton runs on its data Redis, registered once per client (redis-py
    reloads a script after NOSCRIPT)."""

    def __init__(self, redis: Redis) -> None:
        def register(name: str) -> AsyncScript:
            return redis.register_script(lua_source(name))

        self.remember = register("remember")
        self.recall = register("recall")
        self.record_outcome = register("record_outcome")
        self.touch_session = register("touch_session")
        self.forget_record = register("forget_record")
        self.forget_observations = register("forget_observations")
        self.search = register("search")
        self.index_doc = register("index_doc")
        self.create_packet = register("create_packet")
        self.claim_packet = register("claim_packet")
        self.renew_lease = register("renew_lease")
        self.settle_packet = register("settle_packet")
        self.expire_leases = register("expire_leases")
        self.expire_packets = register("expire_packets")
        self.release_lock = register("release_lock")

    async def load(self, redis: Redis) -> int:
        """Load every script not yet in Redis' cache (after a restart or SCRIPT FLUSH);
        returns how many scripts are ready."""
        scripts = [value for value in vars(self).values() if isinstance(value, AsyncScript)]
        for script in scripts:  # SCRIPT LOAD is idempotent (and reaches every cluster primary)
            await redis.script_load(script.script)
        return len(scripts)
