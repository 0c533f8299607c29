"""Pure rules: ref validation, the confidence formula, the canonical encoding."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import msgpack
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from baton.server.model import confidence
from baton.server.model.clock import iso
from baton.server.model.errors import InvalidInput
from baton.server.model.integrity import canonical_bytes, plain_json
from baton.server.model.validation import parse_ref


@given(st.lists(st.integers(min_value=0, max_value=4_102_444_800_000_000), max_size=8))
def test_timestamps_are_iso_8601_utc_with_microseconds(moments: list[int]) -> None:
    """Every timestamp Baton stores and hashes is exactly what datetime formats, however
    often a second is asked for (the whole seconds are kept)."""
    for micros in [*moments, *moments]:
        expected = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
        assert iso(micros) == expected.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_scope_is_everything_before_the_last_slash() -> None:
    """`listing/553/assessment` is key `assessment` in scope `listing/553`."""
    ref = parse_ref("listing/553/assessment")
    assert (ref.scope, ref.key) == ("listing/553", "assessment")


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("", "non-empty"),
        ("nokey", "no scope"),
        ("a//b", "empty segment"),
        ("/a/b", "empty segment"),
        ("a/b/", "empty segment"),
        ("a/../b", "segment '..'"),
        ("a/b c", "segment 'b c'"),
        ("a/{b}", "segment '{b}'"),
        ("a/" + "x" * 600, "limit is 512"),
    ],
)
def test_invalid_refs_are_refused_with_the_reason(ref: str, reason: str) -> None:
    """Each malformed ref names what is wrong with it."""
    with pytest.raises(InvalidInput, match=reason) as caught:
        parse_ref(ref)
    assert caught.value.field == "ref"


def test_confidence_demo_numbers() -> None:
    """Success closes a fifth of the gap (0.80 -> 0.84); failure keeps 65% (0.60 -> 0.39)."""
    assert confidence.moved(0.80, "success") == pytest.approx(0.84)
    assert confidence.moved(0.60, "failure") == pytest.approx(0.39)


def test_repeated_successes_approach_but_never_reach_one() -> None:
    """Confidence never falls on success and stays below 1 however much evidence arrives."""
    value = 0.5
    for _ in range(5000):
        after = confidence.moved(value, "success")
        assert value <= after < 1.0
        value = after
    assert value > 0.9999


def test_repeated_failures_approach_but_never_reach_zero() -> None:
    """Confidence never rises on failure and stays above 0."""
    value = 0.5
    for _ in range(5000):
        after = confidence.moved(value, "failure")
        assert 0.0 < after <= value
        value = after
    assert value < 0.0001


def test_canonical_encoding_is_sorted_compact_utf8() -> None:
    """Keys sorted at every depth, no whitespace, non-ASCII kept as UTF-8."""
    encoded = canonical_bytes({"b": 1, "a": {"z": "é", "y": [1.5, None, True]}})
    assert encoded == '{"a":{"y":[1.5,null,true],"z":"é"},"b":1}'.encode()


def test_canonical_encoding_refuses_nan() -> None:
    """NaN and infinities have no JSON form, so they cannot be hashed."""
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError):
            canonical_bytes({"x": bad})


INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)  # what msgpack stores
JSON_SCALARS = st.none() | st.booleans() | INT64 | st.text()


def json_values(scalars: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=12,
    )


@given(json_values(JSON_SCALARS))
@example({"b": [1, None, True], "a": {"é": '\u2028\x00\x7f"\\', "É": -(2**63)}, "😀": ""})
def test_the_floatless_encoding_writes_the_same_bytes(value: object) -> None:
    """Hashes do not depend on the encoder: for JSON without floats, the fast encoder
    writes exactly the canonical bytes json writes (keys sorted alike, same escapes)."""
    assert canonical_bytes({"value": value}, floatless=True) == canonical_bytes({"value": value})


def holds_float(value: object) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, list):
        return any(holds_float(item) for item in value)
    return isinstance(value, dict) and any(holds_float(item) for item in value.values())


@given(json_values(JSON_SCALARS | st.floats(allow_nan=False, allow_infinity=False)))
@example(1e16)
@example([0.5, "ł", "x" * 200, 50_000])
def test_a_packed_value_holding_a_float_is_never_called_plain(value: object) -> None:
    """A value holding a float is hashed by json: plain_json never says True for its packed
    form (it may say False for one without: then json writes it, as it would anyway)."""
    if holds_float(value):
        assert not plain_json(msgpack.packb(value))


@pytest.mark.parametrize(
    "other",
    [b"x", b"x" * 300, b"x" * 70_000, msgpack.ExtType(1, b"x"), msgpack.ExtType(5, b"x" * 20)],
    ids=["bin8", "bin16", "bin32", "fixext", "ext8"],
)
def test_a_packed_value_holding_bytes_or_an_extension_is_never_called_plain(
    other: object,
) -> None:
    """Bytes and extension values have no JSON form: their packed form is never plain."""
    assert not plain_json(msgpack.packb({"value": [1, other]}))


def test_keys_that_are_not_text_keep_jsons_encoding() -> None:
    """An object key that is not text (only the in-process API could pass one) is written
    as json writes it, whichever encoder was asked for."""
    assert canonical_bytes({2: "a", 10: "b"}, floatless=True) == b'{"2":"a","10":"b"}'


def test_a_confidence_written_on_a_bound_comes_inside_after_an_outcome() -> None:
    """A fact written at 1.0 (or 0.0) does not stay there: a success brings 1.0 to just
    below 1 and a failure brings 0.0 to just above 0 (agent-handoff-memory's rule)."""
    assert 0.99 < confidence.moved(1.0, "success") < 1.0
    assert 0.0 < confidence.moved(0.0, "failure") < 0.01
    assert confidence.moved(1.0, "failure") == pytest.approx(0.65)
