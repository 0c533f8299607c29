"""Every Lua script touches only the keys it is given: the suite runs every script with a
check in front (``BATON_LUA_KEY_CHECK``, set by conftest) that refuses a command on any other
key, so a script that builds a key name fails whichever test runs it."""

from __future__ import annotations

from importlib import resources

import pytest
import redis
from redis.exceptions import ResponseError

from baton.server.runtime.scripts import PRELUDES, Scripts, lua_source

KEY_CHECK = resources.files("baton.server").joinpath("lua", "key_check.lua").read_text()


def test_every_script_runs_behind_the_key_check_in_the_suite(sync_redis: redis.Redis) -> None:
    """Each script Baton registers starts with the check."""
    names = set(vars(Scripts(redis.asyncio.Redis()))) | set(PRELUDES) | {"note_token_use"}
    assert names
    for name in names:
        assert lua_source(name).startswith(KEY_CHECK), name


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        ("return redis.call('GET', KEYS[1])", None),
        ("return redis.call('GET', KEYS[1] .. ':log')", "probe:a:log"),
        ("return redis.call('HGETALL', ARGV[1])", "probe:elsewhere"),
        ("return redis.call('DEL', KEYS[1], 'probe:other')", "probe:other"),
        ("return redis.pcall('GET', 'probe:built')", "probe:built"),
        # a follow-up's failure is caught with pcall; this one is not
        (
            "local ok, e = pcall(function() redis.call('GET', 'probe:in-pcall') end) return 1",
            "probe:in-pcall",
        ),
        ("return redis.call('TIME')[1] ~= nil", None),  # a command without keys
    ],
)
def test_a_command_on_a_key_not_given_fails_the_script(
    sync_redis: redis.Redis, body: str, refused: str | None
) -> None:
    """A script that builds a key name, takes one from ARGV, or names one in its source
    fails with UNDECLARED and the key's name, even when it runs the command under pcall; a
    script on its own keys, or a command without keys, runs."""
    script = sync_redis.register_script(KEY_CHECK + body)
    if refused is None:
        script(keys=["probe:a"], args=["probe:elsewhere"])
        return
    with pytest.raises(ResponseError, match=f"UNDECLARED key {refused}"):
        script(keys=["probe:a"], args=["probe:elsewhere"])
