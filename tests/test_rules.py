"""Pure rules: ref validation, the confidence formula, the canonical encoding."""

from __future__ import annotations

import math

import pytest

from baton.server import confidence
from baton.server.errors import InvalidInput
from baton.server.integrity import canonical_bytes
from baton.server.validation import parse_ref


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
