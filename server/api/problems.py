"""Every error leaves the API as problem+json (RFC 9457) naming the field or ref at fault."""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any

import msgspec
import structlog
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.plugins.problem_details import ProblemDetailsException
from litestar.types import ExceptionHandlersMap, Receive, Scope, Send
from prometheus_client import Counter

from baton.server.api.auth import AGENTMEMORY
from baton.server.model.errors import describe
from baton.server.model.validation import in_words
from baton.server.runtime.failures import agentmemory_error, failure_of

log = structlog.get_logger("baton.api")
REDIS_REFUSALS = Counter(
    "baton_redis_write_refusals_total", "Writes Redis refused (disk full, out of memory, read-only)"
)
REDIS_ERRORS = Counter("baton_redis_errors", "Requests that failed because Redis was unreachable")
NAMED_FIELD = re.compile(r"field `([^`]+)`")
PROBLEM_MEDIA_TYPE = "application/problem+json"


class Problem(msgspec.Struct, kw_only=True):
    """An error as RFC 9457 problem details. Further members say what is at fault, e.g.
    ``ref``, ``packet``, ``current_version`` or, for invalid input, ``errors``."""

    status: int
    title: str
    detail: str
    field: str | None = None


# What each error status means on Baton's routes.
PROBLEM_MEANINGS: dict[int, str] = {
    400: "The request is malformed (e.g. a body that is not JSON, an identity header twice)",
    401: "A valid token is required (only when tokens are configured)",
    403: "The token or the calling agent may not do this (another agent, session or namespace)",
    404: "Nothing exists under that ref, id or version",
    409: "The record or packet is not in the state the request expects",
    413: "The value or the body is over the configured limit",
    415: "The body is not application/json",
    421: "Open mode answers loopback Host names only (and BATON_ALLOWED_HOSTS)",
    422: "A field is invalid; field names it",
    429: "Too many requests (only when a rate limit is configured)",
    507: "Redis cannot write to its disk (full): the write is not acknowledged",
    503: "Redis cannot be reached right now; retry shortly",
}
ALWAYS = (400, 401, 403, 415, 421, 422, 429, 503, 507)


def problems(*statuses: int) -> dict[int, ResponseSpec]:
    """The error responses of a route for its OpenAPI entry: ``statuses`` and those any
    route can answer with (``ALWAYS``)."""
    return {
        status: ResponseSpec(
            data_container=Problem,
            media_type=PROBLEM_MEDIA_TYPE,
            description=PROBLEM_MEANINGS[status],
            generate_examples=False,
        )
        for status in sorted({*ALWAYS, *statuses})
    }


def _problem(
    request: Request[Any, Any, Any],
    status: int,
    title: str,
    detail: str,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Response[Any]:
    """The error as problem+json; on agentmemory's routes as its clients read errors,
    ``{"error": detail}``."""
    if request.url.path.startswith(AGENTMEMORY):
        return Response({"error": detail}, status_code=status, headers=headers)
    return ProblemDetailsException(
        status_code=status, title=title, detail=detail, headers=headers, extra=extra or None
    ).to_response(request)


def failed(request: Request[Any, Any, Any], error: Exception) -> Response[Any]:
    """Baton's own errors, Redis's failures and bugs, as :func:`failure_of` translates them
    (counted and logged by kind); on agentmemory's routes in agentmemory's words."""
    failure = failure_of(error)
    if failure.kind == "unreachable":
        REDIS_ERRORS.inc()
        log.warning("redis unavailable", error=describe(error), path=request.url.path)
    elif failure.kind == "refused":
        REDIS_REFUSALS.inc()
        log.warning("redis refused a write", error=failure.detail, path=request.url.path)
    elif failure.kind == "unexpected":
        log.exception("unhandled error", path=request.url.path)
    if request.url.path.startswith(AGENTMEMORY):
        status, detail = agentmemory_error(error, failure)
        return Response({"error": detail}, status_code=status)
    return _problem(request, failure.status, failure.title, failure.detail, **failure.extra)


def validation_error(request: Request[Any, Any, Any], error: ValidationException) -> Response[Any]:
    """msgspec/Litestar decoding failures are 422s that say which field and why."""
    errors = [
        {**item, "key": _field_of(item)}
        for item in (error.extra if isinstance(error.extra, list) else [])
        if isinstance(item, dict)
    ]
    for item in errors:
        item["message"] = in_words(str(item.get("message", "")))
    detail = "; ".join(f"{item['key']}: {item['message']}" for item in errors)
    return _problem(
        request,
        422,
        "Invalid input",
        detail or str(error.detail),
        field=errors[0]["key"] if errors else None,
        errors=errors,
    )


def _field_of(item: dict[str, Any]) -> str:
    """The field at fault; msgspec reports missing and unknown body fields against "data"."""
    named = NAMED_FIELD.search(str(item.get("message", "")))
    key = item.get("key")
    if named and key in (None, "data"):
        return named.group(1)
    return str(key or item.get("source") or "body")


def http_error(request: Request[Any, Any, Any], error: HTTPException) -> Response[Any]:
    """Litestar's own refusals, with their headers (a 405's ``Allow``); a body cut off for
    its size names the limit, as a value over its own limit does."""
    extra: dict[str, Any] = {}
    handler = request.scope.get("route_handler")
    if error.status_code == 413 and isinstance(handler, HTTPRouteHandler):
        extra = {"field": "body", "limit": handler.resolve_request_max_body_size()}
    return _problem(
        request,
        error.status_code,
        HTTPStatus(error.status_code).phrase,
        str(error.detail),
        headers=error.headers,
        **extra,
    )


def too_deep(request: Request[Any, Any, Any], error: RecursionError) -> Response[Any]:
    """A body nested beyond what the JSON decoder follows (hundreds of levels)."""
    return _problem(request, 422, "Invalid input", "the body is nested too deeply", field="body")


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    ValidationException: validation_error,
    HTTPException: http_error,
    RecursionError: too_deep,
    Exception: failed,
}


async def answer_error(scope: Scope, receive: Receive, send: Send, error: Exception) -> None:
    """Send the response :data:`EXCEPTION_HANDLERS` give ``error`` (the handler of its
    nearest class): for an error raised in a middleware, before Litestar's own handling."""
    handler = next(
        EXCEPTION_HANDLERS[kind] for kind in type(error).__mro__ if kind in EXCEPTION_HANDLERS
    )
    request: Request[Any, Any, Any] = Request(scope, receive)
    response = handler(request, error)
    await response.to_asgi_response(app=None, request=request)(scope, receive, send)
