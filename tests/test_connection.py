"""How Baton talks to Redis: commands packed in C must be the bytes redis-py would send."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from baton.server.connection import TCPConnection

ARGUMENT = st.one_of(
    st.text(),
    st.binary(),
    st.integers(),
    st.floats(allow_nan=False),
    st.floats(),
)


@given(
    name=st.sampled_from(["SET", "EVALSHA", "SCRIPT LOAD", b"HSET", b"CONFIG GET"]),
    args=st.lists(ARGUMENT, max_size=12),
)
def test_hiredis_packing_sends_the_same_bytes_as_redis_py(
    name: str | bytes, args: list[object]
) -> None:
    """Every str, bytes, int and float argument (command names of two words included) is
    packed exactly as redis-py's own packer does."""
    ours = b"".join(TCPConnection().pack_command(name, *args))
    theirs = b"".join(Connection().pack_command(name, *args))
    assert ours == theirs


@pytest.mark.parametrize("bad", [None, True, [1], {"a": 1}])
def test_values_redis_cannot_hold_are_refused(bad: object) -> None:
    """None, booleans and containers raise DataError, as with redis-py's packer."""
    with pytest.raises(DataError):
        TCPConnection().pack_command("SET", "k", bad)
    with pytest.raises(DataError):
        Connection().pack_command("SET", "k", bad)
