"""Domain errors. Each carries the HTTP status the REST API answers with."""

from __future__ import annotations

from typing import Any


class BatonError(Exception):
    """Base of Baton's own errors; rendered as problem+json by the API. ``kind`` says where
    one comes from (``baton.server.runtime.failures.Failure``): most are the caller's mistakes."""

    status_code = 400
    title = "Bad request"
    kind = "caller"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class InvalidInput(BatonError):
    """A field failed validation; ``field`` names it."""

    status_code = 422
    title = "Invalid input"

    def __init__(self, field: str, detail: str, **extra: Any) -> None:
        super().__init__(f"{field}: {detail}", field=field, **extra)
        self.field = field


class NotFound(BatonError):
    """An unknown ref, version, session or packet."""

    status_code = 404
    title = "Not found"


class Forbidden(BatonError):
    """The caller is not the agent allowed to do this (e.g. another agent's packet)."""

    status_code = 403
    title = "Forbidden"


class StateConflict(BatonError):
    """A packet is not in a state that allows the transition asked for."""

    status_code = 409
    title = "Wrong state"


class VersionConflict(BatonError):
    """The caller expected another current version; nothing was written."""

    status_code = 409
    title = "Version conflict"


class TooLarge(BatonError):
    """A value over the configured size limit."""

    status_code = 413
    title = "Too large"


class StoreUnavailable(BatonError):
    """Redis cannot be reached; the request may be retried."""

    status_code = 503
    title = "Store unavailable"
    kind = "unavailable"


class Ambiguous(BatonError):
    """The same identity field was given twice with no way to tell which one counts."""

    status_code = 400
    title = "Ambiguous identity"

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}", field=field)


class Unauthorized(BatonError):
    """Tokens are required and none (or an unknown one) was sent."""

    status_code = 401
    title = "Unauthorized"


class TooManyFailures(BatonError):
    """Too many failed logins from one client address."""

    status_code = 429
    title = "Too many failed logins"


class UnsupportedMediaType(BatonError):
    """A request body that is not JSON."""

    status_code = 415
    title = "Unsupported media type"


class MisdirectedRequest(BatonError):
    """An open-mode server asked for by a Host name it does not answer."""

    status_code = 421
    title = "Misdirected request"


class TooManyStreams(BatonError):
    """A caller holding as many live event streams as it may."""

    status_code = 429
    title = "Too many open streams"


class QuotaReached(BatonError):
    """A write that would grow the store past one of its quotas; nothing was written."""

    status_code = 413
    title = "Quota reached"

    @classmethod
    def of(cls, what: str, limit: int, setting: str, **extra: object) -> QuotaReached:
        return cls(
            f"{what} reached its quota of {limit:,} ({setting}); nothing was written",
            limit=limit,
            setting=setting,
            **extra,
        )


class TooManySessions(BatonError):
    """A caller holding as many open MCP sessions as it may."""

    status_code = 429
    title = "Too many open MCP sessions"

    @classmethod
    def of(cls, owner: str, cap: int) -> TooManySessions:
        """``owner``: whose sessions they are, as a person reads it ("token t_1", "agent
        scout")."""
        return cls(
            f"{owner} holds {cap} open MCP sessions, the most one token (or, in open mode, "
            "one agent) may (BATON_MCP_SESSIONS); close one (DELETE /mcp with its "
            "mcp-session-id) or wait for an idle one to time out (BATON_MCP_IDLE_SECONDS)",
            limit=cap,
        )


def describe(error: BaseException) -> str:
    """An exception as a log line can say it: its type and message (redis-py 8's errors have
    a ``repr`` that names neither, e.g. ``server:ResponseError``)."""
    return f"{type(error).__name__}: {error}"
