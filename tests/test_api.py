"""The REST API over real HTTP against a running ``baton serve``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import warnings
from typing import Any

import httpx
import pytest
import redis
from litestar import Litestar, get
from litestar.exceptions import LitestarDeprecationWarning
from litestar.testing import TestClient
from structlog.testing import capture_logs

from baton.server.api.app import create_app
from baton.server.api.problems import EXCEPTION_HANDLERS
from tests.conftest import REPO

PROBLEM = "application/problem+json"


def remember(http: httpx.Client, ref: str, value: Any, **fields: Any) -> httpx.Response:
    return http.post("/v1/records", json={"ref": ref, "value": value, **fields})


def assert_problem(response: httpx.Response, status: int, field: str | None = None) -> dict:
    """The response is problem+json with the given status (and field at fault)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status
    assert body["title"] and body["detail"]
    if field is not None:
        assert body["field"] == field
        assert field in body["detail"]
    return body


def test_remember_then_recall_over_http(http: httpx.Client) -> None:
    """POST /v1/records answers 201 with the new version; GET returns it, author from header."""
    created = remember(http, "listing/553/assessment", {"verdict": "apply"}, confidence=0.8)
    assert created.status_code == 201
    assert created.json()["version"] == 1
    second = remember(http, "listing/553/assessment", {"verdict": "maybe"})
    assert (second.json()["version"], second.json()["superseded"]) == (2, 1)

    current = http.get("/v1/records/listing/553/assessment").json()
    assert (current["version"], current["value"], current["author"]) == (
        2,
        {"verdict": "maybe"},
        "tester",
    )
    first = http.get("/v1/records/listing/553/assessment", params={"version": 1}).json()
    assert (first["value"], first["superseded_by"], first["confidence"]) == (
        {"verdict": "apply"},
        2,
        0.8,
    )


def test_listing_history_outcomes_and_stats(http: httpx.Client) -> None:
    """The read endpoints agree with what was written."""
    remember(http, "listing/482/assessment", "apply", confidence=0.8, tags=["job"])
    remember(http, "source/boards/rate-limit", "60s", confidence=0.6)

    page = http.get("/v1/records", params={"scope": "listing", "tags": ["job"]}).json()
    assert [record["ref"] for record in page["records"]] == ["listing/482/assessment"]
    moved = http.post(
        "/v1/outcomes",
        json={"outcome": "success", "outcome_ref": "RUN-42", "refs": ["listing/482/assessment"]},
    )
    assert moved.status_code == 201
    assert moved.json()["moves"][0]["after"] == pytest.approx(0.84)
    log = http.get("/v1/outcomes/listing/482/assessment").json()
    assert [(e["before"], e["outcome_ref"]) for e in log] == [(0.8, "RUN-42")]
    history = http.get("/v1/history/listing/482/assessment").json()
    assert history["successes"] == 1
    assert [v["chain_ok"] for v in history["versions"]] == [True]
    stats = http.get("/v1/stats", params={"verify": "true"}).json()
    assert (stats["refs"], stats["versions"], stats["outcomes"], stats["broken"]) == (2, 2, 1, [])


def test_session_header_records_touched_refs(http: httpx.Client) -> None:
    """Requests carrying X-Baton-Session mark what they read or wrote, and record_outcome
    without refs applies to exactly those."""
    remember(http, "a/b", 1)
    remember(http, "c/d", 1)
    session = http.post("/v1/sessions").json()
    headers = {"X-Baton-Session": session["id"]}
    http.get("/v1/records/a/b", headers=headers)

    assert http.get(f"/v1/sessions/{session['id']}").json()["touched"] == {"a/b": 1}
    report = http.post(
        "/v1/outcomes", json={"outcome": "failure", "outcome_ref": "RUN-1"}, headers=headers
    ).json()
    assert [move["ref"] for move in report["moves"]] == ["a/b"]


def test_verify_script_in_docs_checks_a_chain_without_baton(http: httpx.Client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """docs/verify_chain.py, stdlib only, recomputes the chain from the history endpoint and
    flags a history whose value was altered."""
    for value in ({"n": 1, "s": "é"}, [1.5, None], "three"):
        remember(http, "scope/key", value, tags=["x"])
    history = http.get("/v1/history/scope/key").json()
    path = tmp_path / "history.json"
    path.write_text(json.dumps(history))
    script = [sys.executable, "-I", str(REPO / "docs" / "verify_chain.py"), str(path)]

    clean = subprocess.run(script, capture_output=True, text=True, check=False)
    assert clean.returncode == 0, clean.stdout
    assert clean.stdout.count(": ok") == 3

    history["versions"][1]["value"] = [2.5, None]
    path.write_text(json.dumps(history))
    tampered = subprocess.run(script, capture_output=True, text=True, check=False)
    assert tampered.returncode == 1
    assert "scope/key v2: BROKEN hash" in tampered.stdout


# -- errors: problem+json, never a 500 -------------------------------------------------------


def test_unknown_ref_and_version_are_404(http: httpx.Client) -> None:
    """Unknown refs, versions, sessions and routes are 404 problems naming what is missing."""
    body = assert_problem(http.get("/v1/records/no/such"), 404)
    assert body["ref"] == "no/such"
    remember(http, "a/b", 1)
    body = assert_problem(http.get("/v1/records/a/b", params={"version": 5}), 404)
    assert body["current_version"] == 1
    assert_problem(http.get("/v1/history/no/such"), 404)
    assert_problem(http.get("/v1/sessions/s_unknown"), 404)
    assert_problem(http.get("/v1/nowhere"), 404)


def test_expected_version_conflict_is_409_and_writes_nothing(http: httpx.Client) -> None:
    """A stale expected_version is a 409 carrying the current version."""
    remember(http, "a/b", 1)
    body = assert_problem(remember(http, "a/b", 2, expected_version=0), 409)
    assert body["current_version"] == 1
    assert http.get("/v1/records/a/b").json()["value"] == 1


def test_oversized_value_is_413(http: httpx.Client) -> None:
    """A value over BATON_MAX_VALUE_BYTES (64 KiB in this server) is a 413 naming the limit."""
    body = assert_problem(remember(http, "a/b", "x" * 70_000), 413, field="value")
    assert body["limit"] == 65536
    assert_problem(http.get("/v1/records/a/b"), 404)


def test_request_body_over_the_limit_is_413(http: httpx.Client) -> None:
    """A body far over the limit is cut off by the server with a 413 problem naming the
    body's limit (the value limit and room for the rest of the body)."""
    body = assert_problem(remember(http, "a/b", "x" * 400_000), 413)
    assert (body["field"], body["limit"]) == ("body", 65_536 + 64 * 1024)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ref": "noscope", "value": 1}, "ref"),
        ({"ref": "a/b c", "value": 1}, "ref"),
        ({"ref": 5, "value": 1}, "ref"),
        ({"value": 1}, "ref"),
        ({"ref": "a/b"}, "value"),
        ({"ref": "a/b", "value": 1, "confidence": 2}, "confidence"),
        ({"ref": "a/b", "value": 1, "tags": "x"}, "tags"),
        ({"ref": "a/b", "value": 1, "tags": ["bad tag"]}, "tags"),
        ({"ref": "a/b", "value": 1, "expected_version": -1}, "expected_version"),
        ({"ref": "a/b", "value": 1, "based_on": [-1]}, "based_on[0]"),
        ({"ref": "a/b", "value": 1, "based_on": 3}, "based_on"),
        ({"ref": "fresh/never", "value": 1, "based_on": [1]}, "based_on"),  # no version 1 yet
        ({"ref": "a/b", "value": 1, "colour": "red"}, "colour"),
    ],
)
def test_invalid_remember_bodies_are_422_naming_the_field(
    http: httpx.Client, body: dict, field: str
) -> None:
    """Each invalid field of a remember body is a 422 that names it."""
    assert_problem(http.post("/v1/records", json=body), 422, field=field)


def test_invalid_outcomes_and_queries_are_422(http: httpx.Client) -> None:
    """Outcome and query errors name their field; nothing is a 500."""
    assert_problem(
        http.post("/v1/outcomes", json={"outcome": "meh", "outcome_ref": "R"}), 422, "outcome"
    )
    assert_problem(http.post("/v1/outcomes", json={"outcome": "success"}), 422, "outcome_ref")
    assert_problem(
        http.post("/v1/outcomes", json={"outcome": "success", "outcome_ref": "R"}), 422, "refs"
    )
    assert_problem(http.get("/v1/records", params={"limit": 0}), 422, "limit")
    assert_problem(http.get("/v1/records", params={"limit": 10_000}), 422, "limit")
    assert_problem(http.get("/v1/records", params={"scope": "a b"}), 422, "scope")
    assert_problem(
        http.get("/v1/records/a/b", headers={"X-Baton-Agent": "no spaces"}), 422, "x-baton-agent"
    )
    assert_problem(http.get("/v1/records/a/b", headers={"X-Baton-Namespace": "UP"}), 422)


def test_outcome_on_unknown_ref_is_404(http: httpx.Client) -> None:
    """An outcome naming an unknown ref is refused as a whole."""
    body = assert_problem(
        http.post("/v1/outcomes", json={"outcome": "success", "outcome_ref": "R", "refs": ["x/y"]}),
        404,
    )
    assert body["refs"] == ["x/y"]


def test_malformed_json_is_a_400_problem(http: httpx.Client) -> None:
    """A body that is not JSON at all is a 400 problem, not a 500."""
    response = http.post(
        "/v1/records", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert_problem(response, 400)


def test_health_and_openapi(http: httpx.Client) -> None:
    """Health, readiness and the OpenAPI schema are served; /schema itself is the
    interactive page the README points to."""
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json()["status"] == "ready"
    schema = http.get("/schema/openapi.json").json()
    assert "/v1/records" in schema["paths"]
    assert "/v1/records/{ref}" in schema["paths"]
    for page in ("/schema", "/schema/swagger"):
        answer = http.get(page)
        assert answer.headers["content-type"].startswith("text/html"), page


def test_a_method_a_route_lacks_is_a_405_naming_the_methods_it_has(http: httpx.Client) -> None:
    """405 answers carry Allow (RFC 9110), as problem+json."""
    response = http.request("TRACE", "/v1/whoami")
    assert_problem(response, 405)
    assert "GET" in response.headers["allow"]


def test_options_names_every_method_of_every_documented_path(http: httpx.Client) -> None:
    """OPTIONS on each path of the OpenAPI document answers 204 with an Allow header naming
    exactly the methods the document has for that path, and OPTIONS (Litestar 2 named only
    the first handler's method on paths with GET and POST in separate handlers)."""
    document = http.get("/schema/openapi.json").json()
    wrong = {}
    for path, operations in document["paths"].items():
        kinds = {
            parameter["name"]: parameter["schema"].get("type")
            for operation in operations.values()
            for parameter in operation.get("parameters", [])
            if parameter["in"] == "path"
        }
        url = path.format(**{name: 1 if kind == "integer" else "x" for name, kind in kinds.items()})
        answer = http.options(url)
        documented = sorted({method.upper() for method in operations} | {"OPTIONS"})
        if answer.status_code != 204 or answer.headers["allow"] != ", ".join(documented):
            wrong[path] = (answer.status_code, answer.headers.get("allow"), documented)
    assert len(document["paths"]) > 30
    assert wrong == {}


def test_agentmemory_routes_answer_every_error_in_agentmemorys_shape() -> None:
    """On /agentmemory/ a lost Redis or an unexpected error is {"error": ...} with its
    status, as agentmemory's clients read errors; elsewhere it is problem+json."""

    async def lost_redis() -> None:
        raise redis.exceptions.ConnectionError("gone")

    async def broken() -> None:
        raise RuntimeError("bug")

    app = Litestar(
        route_handlers=[
            get(path)(handler)
            for path, handler in [
                ("/agentmemory/lost", lost_redis),
                ("/agentmemory/broken", broken),
                ("/v1/lost", lost_redis),
            ]
        ],
        exception_handlers=EXCEPTION_HANDLERS,
    )
    with TestClient(app) as client, capture_logs():
        lost = client.get("/agentmemory/lost")
        assert lost.status_code == 503
        assert lost.json() == {
            "error": "Baton cannot reach its Redis server right now; retry shortly"
        }
        broken_answer = client.get("/agentmemory/broken")
        assert broken_answer.status_code == 500
        assert broken_answer.json() == {"error": "an unexpected error occurred; it has been logged"}
        assert_problem(client.get("/v1/lost"), 503)


def test_request_bodies_are_documented_as_the_server_decodes_them(http: httpx.Client) -> None:
    """Every documented request body refuses unknown fields and says so; an optional
    number's bound is in the document and enforced; a body the server lets be left out is
    not required."""
    schema = http.get("/schema/openapi.json").json()
    components = schema["components"]["schemas"]
    bodies = [
        (path, method, operation["requestBody"])
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if isinstance(operation, dict) and "requestBody" in operation
    ]
    assert len(bodies) >= 15
    swagger = http.get("/schema/swagger").text  # Swagger UI embeds the document
    assert '"additionalProperties":false' in swagger.replace(" ", "")
    for path, method, body in bodies:
        declared = body["content"]["application/json"]["schema"]
        members = [m for key in ("oneOf", "anyOf", "allOf") for m in declared.get(key, [])]
        refs = [declared, *members]  # allOf: a body with an example
        (name,) = [ref["$ref"].rsplit("/", 1)[1] for ref in refs if "$ref" in ref]
        assert components[name]["additionalProperties"] is False, (path, method)

    resume = schema["paths"]["/v1/agents/{agent}/resume"]["post"]["requestBody"]
    assert resume["required"] is False
    lease = components["ResumeBody"]["properties"]["lease_seconds"]["anyOf"][0]
    assert lease["exclusiveMinimum"] == 0
    headers = {"X-Baton-Agent": "reader"}
    assert http.post("/v1/agents/reader/resume", headers=headers).status_code == 200
    assert_problem(
        http.post("/v1/agents/reader/resume", headers=headers, json={"lease_seconds": 0}),
        422,
        "lease_seconds",
    )
    assert_problem(http.post("/v1/agents/reader/resume", headers=headers, json={"lease": 5}), 422)


def test_error_responses_match_their_openapi_entry(http: httpx.Client) -> None:
    """Errors are declared in the OpenAPI document, as problem+json with the members they
    carry: a version conflict, an unknown record, invalid input."""
    schema = http.get("/schema/openapi.json").json()
    http.post("/v1/records", json={"ref": "doc/a", "value": 1})
    answers = {
        ("/v1/records", "post"): http.post(
            "/v1/records", json={"ref": "doc/a", "value": 2, "expected_version": 0}
        ),
        ("/v1/records/{ref}", "get"): http.get("/v1/records/doc/missing"),
        ("/v1/handoffs", "post"): http.post("/v1/handoffs", json={"to": "", "summary": "s"}),
    }
    assert [response.status_code for response in answers.values()] == [409, 404, 422]
    for (path, method), response in answers.items():
        declared = schema["paths"][path][method]["responses"][str(response.status_code)]
        problem = declared["content"]["application/problem+json"]["schema"]
        required = schema["components"]["schemas"][problem["$ref"].split("/")[-1]]["required"]
        assert response.headers["content-type"] == "application/problem+json"
        assert set(required) <= response.json().keys()


def test_routes_declare_every_parameter_as_litestar_3_requires(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dependencies, path, query and body parameters are all marked explicitly: building
    the app and its OpenAPI document raises no Litestar deprecation warning."""
    monkeypatch.setenv("BATON_REDIS_URL", redis_url)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LitestarDeprecationWarning)
        app = create_app()
        assert "/v1/records" in app.openapi_schema.paths


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_deeply_nested_json_is_refused_before_anything_is_written(
    http: httpx.Client, sync_redis
) -> None:  # type: ignore[no-untyped-def]
    """Values and hook data nested more than 64 levels are a 422 naming the field, however
    deep (1,000 levels included) and with or without expected_version; nothing is written."""
    for depth in (65, 400, 1000):
        body = f'{{"ref": "deep/x", "value": {nested(depth)}, "expected_version": 0}}'
        answer = http.post(
            "/v1/records", content=body, headers={"Content-Type": "application/json"}
        )
        assert answer.status_code == 422, (depth, answer.text)
        assert answer.json()["field"] in ("value", "body")
        observed = http.post(
            "/v1/observations",
            headers={"Content-Type": "application/json"},
            content=f'{{"hook_type": "stop", "session_id": "s-deep", "project": "p",'
            f' "timestamp": "t", "data": {{"x": {nested(depth)}}}}}',
        )
        assert observed.status_code == 422, (depth, observed.text)
    assert sync_redis.keys("*deep*") == []
    ok = http.post(
        "/v1/records",
        content=f'{{"ref": "deep/x", "value": {nested(63)}}}',
        headers={"Content-Type": "application/json"},
    )
    assert ok.status_code == 201


def test_oversized_lists_are_refused(http: httpx.Client) -> None:
    """Id lists and concepts beyond their limits are 422s naming the field."""
    forget = http.post("/v1/forget", json={"session_id": "s", "observation_ids": ["o"] * 1001})
    assert (forget.status_code, forget.json()["field"]) == (422, "observationIds")
    expand = http.post("/v1/memories/smart-search", json={"expand_ids": ["mem_x"] * 101})
    assert (expand.status_code, expand.json()["field"]) == (422, "expandIds")
    http.post("/v1/sessions", json={"id": "s-big", "cwd": "/r"})
    end = http.post("/v1/sessions/s-big/end", json={"concepts": ["w"] * 51})
    assert (end.status_code, end.json()["field"]) == (422, "concepts")
    summary = http.post("/v1/sessions/s-big/end", json={"summary": "x" * 2001})
    assert (summary.status_code, summary.json()["field"]) == (422, "summary")


def test_a_namespace_header_that_is_not_text_is_a_422(api_url: str, redis_url: str) -> None:
    """Raw bytes in X-Baton-Namespace (not UTF-8) are refused as invalid input, not a 500."""
    import socket

    host, port = api_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as raw:
        raw.sendall(
            b"GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Baton-Namespace: \xff\xfe\r\n"
            b"Connection: close\r\n\r\n"
        )
        answer = b"".join(iter(lambda: raw.recv(4096), b"")).decode("latin-1")
    assert answer.startswith("HTTP/1.1 422") and '"field": "x-baton-namespace"' in answer


def test_a_path_holding_a_nul_is_a_clear_400(http: httpx.Client) -> None:
    """A NUL in a path can name no file or ref: where a route would take the path, 400
    problem+json naming it; where none would, 404; never a 500 (the static files' lookup
    raised)."""
    assert http.get("/%00").status_code == 404  # no route there at all
    for path in ("/static/%00", "/v1/records/a%00b", "/v1/dashboard/records/x%00"):
        answer = http.get(path)
        assert answer.status_code == 400, path
        assert answer.headers["content-type"].startswith("application/problem+json"), path
        assert answer.json()["field"] == "path"


def test_a_host_given_twice_is_400(api_url: str) -> None:
    """Two Host headers (which one would count? RFC 9112 says 400) are refused before any
    route runs, whatever the first one says (open mode used to read only the first)."""
    host, port = api_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(
            b"GET /v1/whoami HTTP/1.1\r\nHost: "
            + f"{host}:{port}".encode()
            + b"\r\nHost: elsewhere.example\r\nX-Baton-Agent: scout\r\n"
            b"Connection: close\r\n\r\n"
        )
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split()[1] == b"400", answer
    assert b"host: given more than once" in rest


def test_an_outcome_never_leaves_confidence_on_a_bound(http: httpx.Client) -> None:
    """Over REST, a record written with confidence 1.0 is below 1 after a success, one
    written with 0.0 above 0 after a failure: the outcome's `after` and the record agree."""
    for ref, start, outcome in (("bound/top", 1.0, "success"), ("bound/bottom", 0.0, "failure")):
        http.post("/v1/records", json={"ref": ref, "value": 1, "confidence": start})
        moved = http.post(
            "/v1/outcomes", json={"outcome": outcome, "outcome_ref": "R-1", "refs": [ref]}
        ).json()["moves"][0]
        assert moved["before"] == start and 0.0 < moved["after"] < 1.0
        assert http.get(f"/v1/records/{ref}").json()["confidence"] == moved["after"]


def test_a_refused_value_is_said_in_words_on_every_surface(http: httpx.Client) -> None:
    """A value an input's pattern or bound refuses is a 422 naming the field and saying the
    rule in words, on REST as through the table's decoding: never msgspec's regex."""
    headers = {"X-Baton-Agent": "scout"}
    for body, field, words in (
        ({"to": "two words", "summary": "s"}, "to", "an agent id is 1-64 letters"),
        ({"to": "bob\n", "summary": "s"}, "to", "an agent id is 1-64 letters"),
        ({"to": "bob", "summary": " "}, "summary", "must be text, not blank"),
    ):
        problem = assert_problem(http.post("/v1/handoffs", json=body, headers=headers), 422, field)
        assert words in problem["detail"] and "regex" not in problem["detail"], problem
    ended = http.post("/v1/sessions/s-words/end", json={"concepts": ["x" * 101]}, headers=headers)
    problem = assert_problem(ended, 422)
    assert "must hold at most 100 characters" in problem["detail"], problem
