"""Every error leaves the API as problem+json (RFC 9457) naming the field or ref at fault."""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any

import redis.exceptions
import structlog
from baton.server.errors import BatonError
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.plugins.problem_details import ProblemDetailsException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

log = structlog.get_logger("baton.api")
NAMED_FIELD = re.compile(r"field `([^`]+)`")


def _problem(request: Request[Any, Any, Any], status: int, title: str, detail: str,
             **extra: Any) -> Response[Any]:  # fmt: skip
    return ProblemDetailsException(
        status_code=status, title=title, detail=detail, extra=extra or None
    ).to_response(request)


def baton_error(request: Request[Any, Any, Any], error: BatonError) -> Response[Any]:
    return _problem(request, error.status_code, error.title, error.detail, **error.extra)


def validation_error(request: Request[Any, Any, Any], error: ValidationException) -> Response[Any]:
    """msgspec/Litestar decoding failures are 422s that say which field and why."""
    errors = [
        {**item, "key": _field_of(item)}
        for item in (error.extra if isinstance(error.extra, list) else [])
        if isinstance(item, dict)
    ]
    detail = "; ".join(f"{item['key']}: {item.get('message')}" for item in errors)
    return _problem(
        request, 422, "Invalid input", detail or str(error.detail),
        field=errors[0]["key"] if errors else None, errors=errors,
    )  # fmt: skip


def _field_of(item: dict[str, Any]) -> str:
    """The field at fault; msgspec reports missing and unknown body fields against "data"."""
    named = NAMED_FIELD.search(str(item.get("message", "")))
    key = item.get("key")
    if named and key in (None, "data"):
        return named.group(1)
    return str(key or item.get("source") or "body")


def http_error(request: Request[Any, Any, Any], error: HTTPException) -> Response[Any]:
    return _problem(request, error.status_code, HTTPStatus(error.status_code).phrase,
                    str(error.detail))  # fmt: skip


def redis_error(request: Request[Any, Any, Any], error: Exception) -> Response[Any]:
    from baton.server.api.metrics import REDIS_ERRORS

    REDIS_ERRORS.inc()
    log.warning("redis unavailable", error=repr(error), path=request.url.path)
    return _problem(
        request, 503, "Store unavailable",
        "Baton cannot reach its Redis server right now; retry shortly",
    )  # fmt: skip


def unexpected_error(request: Request[Any, Any, Any], error: Exception) -> Response[Any]:
    log.exception("unhandled error", path=request.url.path)
    return _problem(request, HTTP_500_INTERNAL_SERVER_ERROR, "Internal error",
                    "an unexpected error occurred; it has been logged")  # fmt: skip


EXCEPTION_HANDLERS: dict[type[Exception], Any] = {
    BatonError: baton_error,
    ValidationException: validation_error,
    HTTPException: http_error,
    redis.exceptions.ConnectionError: redis_error,
    redis.exceptions.TimeoutError: redis_error,
    Exception: unexpected_error,
}
