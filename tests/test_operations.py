"""Operations endpoints, property-based checks of the pure rules, and fuzzing the REST API
from its own OpenAPI schema."""

from __future__ import annotations

import json
import math

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from baton.server.model import confidence
from baton.server.model.errors import InvalidInput
from baton.server.model.integrity import canonical_bytes
from baton.server.model.validation import parse_ref

# The contract: never a 5xx, and what is documented is what comes back.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    response_schema_conformance,
    content_type_conformance,
]
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)
SEGMENT = st.text(alphabet="abcXYZ019._:@+-", min_size=1, max_size=10).filter(
    lambda s: s not in (".", "..")
)


def test_metrics_report_requests_packets_and_verify(http: httpx.Client) -> None:
    """/metrics is Prometheus text with request counts per route, packets per agent and
    state, RQ queue depth and the last verify's result."""
    http.post("/v1/records", json={"ref": "m/x", "value": 1})
    http.post("/v1/handoffs", json={"to": "executor", "summary": "s"})
    http.get("/v1/stats", params={"verify": "true"})
    text = http.get("/metrics").text
    assert 'baton_packets{agent="executor",namespace="default",state="queued"} 1.0' in text
    assert 'baton_rq_queue_depth{agent="executor",namespace="default"} 1.0' in text
    assert 'baton_verify_broken_links{namespace="default"} 0.0' in text
    assert "baton_requests_total" in text and 'path="/v1/records"' in text


def test_readyz_reloads_scripts_after_a_flush(http: httpx.Client, sync_redis) -> None:  # type: ignore[no-untyped-def]
    """readyz answers only once the Lua scripts are in Redis' cache, loading them if needed."""
    sync_redis.script_flush()
    assert http.get("/readyz").json()["scripts"] >= 8
    assert http.post("/v1/records", json={"ref": "r/after", "value": 1}).status_code == 201


@given(st.lists(SEGMENT, min_size=2, max_size=6))
def test_any_valid_ref_parses_back_to_itself(segments: list[str]) -> None:
    """Joining valid segments gives a ref whose scope and key split at the last slash."""
    ref = "/".join(segments)
    parsed = parse_ref(ref)
    assert (parsed.scope, parsed.key) == ("/".join(segments[:-1]), segments[-1])
    assert str(parsed) == ref


@given(st.text(max_size=40))
def test_ref_parsing_never_crashes(text: str) -> None:
    """Any string either parses or is refused with InvalidInput naming the ref."""
    try:
        parse_ref(text)
    except InvalidInput as error:
        assert error.field == "ref"


@given(JSON_VALUES)
def test_canonical_encoding_round_trips_and_ignores_key_order(value: object) -> None:
    """The canonical bytes decode to the same value, and key order never changes them."""
    encoded = canonical_bytes({"v": value})
    assert json.loads(encoded) == {"v": value}
    if isinstance(value, dict):
        reordered = dict(reversed(list(value.items())))
        assert canonical_bytes({"v": reordered}) == encoded


@given(
    st.floats(min_value=0, max_value=1),
    st.lists(st.sampled_from(["success", "failure"]), max_size=300),
)
def test_confidence_stays_strictly_inside_bounds(start: float, outcomes: list[str]) -> None:
    """Any sequence of outcomes, from any start in [0, 1] (the bounds included), keeps
    confidence strictly inside (0, 1), moving the right way each step once inside."""
    value = start
    for outcome in outcomes:
        after = confidence.moved(value, outcome)  # type: ignore[arg-type]
        assert 0.0 < after < 1.0 and not math.isnan(after)
        if confidence.FLOOR <= value <= confidence.CEILING:
            assert (after >= value) if outcome == "success" else (after <= value)
        value = after


@pytest.mark.slow
def test_fuzzed_requests_never_get_a_server_error(api_url: str, redis_url: str) -> None:
    """Requests generated from Baton's own OpenAPI schema, for every operation: no 5xx,
    every status (errors included) is one the schema declares, and every response conforms
    to the schema."""
    schema = schemathesis.openapi.from_url(f"{api_url}/schema/openapi.json")
    schema.config.base_url = api_url
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(operation.as_strategy())
        @settings(
            max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(headers={"X-Baton-Agent": "fuzzer"}, checks=CHECKS)

        try:
            check()
        except Exception as failure:
            failures.append(f"{operation.label}: {failure}"[:600])
    assert failures == []


# The fields agentmemory's clients send, across its routes: the fuzz mixes them with any JSON.
AGENTMEMORY_FIELDS = (
    "content",
    "type",
    "concepts",
    "files",
    "project",
    "agentId",
    "ttlDays",
    "query",
    "limit",
    "format",
    "token_budget",
    "expandIds",
    "sessionId",
    "memoryId",
    "observationIds",
    "memoryIds",
    "hookType",
    "cwd",
    "timestamp",
    "data",
    "title",
    "name",
    "arguments",
    "budget",
    "terms",
    "toolName",
    "reason",
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)


@pytest.mark.slow
def test_fuzzed_agentmemory_bodies_never_get_a_server_error(api_url: str, redis_url: str) -> None:
    """Every /agentmemory route that takes a body, fed bodies mixing its clients' field
    names with any JSON values: never a 5xx, always agentmemory's JSON (never problem+json)."""
    from litestar.routes import HTTPRoute

    from baton.server.api.app import create_app
    from baton.server.runtime.settings import Settings

    routes = [
        (method, route.path)
        for route in create_app(Settings(redis_url=redis_url)).routes
        if isinstance(route, HTTPRoute) and route.path.startswith("/agentmemory/")
        for method in route.methods
        if method in ("POST", "DELETE")
    ]
    assert len(routes) >= 13
    failures: list[str] = []
    with httpx.Client(base_url=api_url, timeout=30) as client:
        for method, path in routes:

            def fuzz(method: str, path: str) -> None:
                @given(
                    st.dictionaries(st.sampled_from(AGENTMEMORY_FIELDS), JSON_VALUES, max_size=6)
                )
                @settings(
                    max_examples=40,
                    deadline=None,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                )
                def check(body: dict[str, object]) -> None:
                    answer = client.request(method, path, json=body)
                    assert answer.status_code < 500, (path, body, answer.text)
                    assert answer.headers["content-type"].startswith("application/json"), (
                        answer.text
                    )

                check()

            try:
                fuzz(method, path)
            except Exception as failure:
                failures.append(f"{method} {path}: {failure}"[:800])
    assert failures == []
