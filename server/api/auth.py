"""The HTTP gate: every request to the API, the agentmemory routes, ``/mcp`` and the
dashboard passes here once. It turns the request into a credential and claims, resolves the
:class:`~baton.server.model.identity.Caller` by the rules of
``baton.server.model.identity`` and leaves it in the request's state; handlers take it from there.

Modes are decided per process and fail closed: if any token exists when the server starts,
or appears later, every request needs ``Authorization: Bearer <token>`` (or the dashboard's
login cookie) until the process stops, even if the last token is revoked. Otherwise the
server is open (``baton serve`` allows that only on loopback): then it answers only loopback
``Host`` names and those in ``BATON_ALLOWED_HOSTS`` (421 otherwise, against DNS rebinding)
and refuses cross-origin writes (403), so a web page cannot use the open API.

In every mode a request body must be JSON (``application/json`` or ``*/*+json``; 415
otherwise) except on the dashboard's form routes, so a browser's "simple" ``text/plain``
request cannot plant data. Failed logins count per client address (429 beyond
``BATON_AUTH_FAILURES``).
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import json
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import structlog
from litestar.enums import ScopeType
from litestar.types import ASGIApp, HTTPResponseStartEvent, Receive, Scope, Send
from redis.asyncio import Redis

from baton.server.model.errors import (
    Ambiguous,
    BatonError,
    Forbidden,
    MisdirectedRequest,
    TooManyFailures,
    Unauthorized,
    UnsupportedMediaType,
)
from baton.server.model.identity import (
    AGENT_HEADER,
    CALLER,
    NAMESPACE_HEADER,
    OPEN,
    REQUEST_CALLER,
    SESSION_HEADER,
    Caller,
    Claims,
    Credential,
    check_session,
    resolve,
)
from baton.server.model.keys import auth_failures_key
from baton.server.model.validation import check_agent
from baton.server.runtime.settings import RATE_UNITS, Settings
from baton.server.stores.tokens import TokenStore

if TYPE_CHECKING:
    from baton.server.stores.backend import Namespace

log = structlog.get_logger("baton.auth")

OPEN_PATHS = ("/healthz", "/readyz", "/agentmemory/livez", "/login", "/static/", "/schema")
OPEN_PREFIXES = tuple(path if path.endswith("/") else f"{path}/" for path in OPEN_PATHS)
LOGIN_COOKIE = "baton_login"
TOKENS_CHECK_SECONDS = 2.0
UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
LOOPBACK_NAMES = {"localhost", "localhost.", "ip6-localhost"}
AGENTMEMORY = "/agentmemory/"


# The request's caller and its namespace, for the dependency providers (``deps.py``): set by
# the gate in the request's own task, so each request sees its own.
REQUEST_NAMESPACE: ContextVar[Namespace] = ContextVar("baton_request_namespace")


def caller_of(scope: Scope) -> Caller:
    """The caller the gate resolved for this request."""
    caller: Caller = scope["state"][CALLER]
    return caller


def set_caller(scope: Scope, caller: Caller) -> None:
    """Make ``caller`` the request's caller, for handlers and middleware alike."""
    scope.setdefault("state", {})[CALLER] = caller
    REQUEST_CALLER.set(caller)


def require_admin(caller: Caller, action: str) -> None:
    """Operator actions (requeue) need an admin token once tokens exist."""
    if not caller.admin:
        raise Forbidden(
            f"{action} needs an admin token; {caller.agent}'s is not one", agent=caller.agent
        )


class Gate:
    """The per-process authentication state and the checks every request passes."""

    def __init__(self, settings: Settings) -> None:
        self.default_namespace = settings.namespace
        self.allowed_hosts = set(settings.allowed_hosts)
        self.agentmemory_secret = settings.agentmemory_secret
        self.agentmemory_agent = check_agent(settings.agentmemory_agent, field="AGENTMEMORY_AGENT")
        self.failure_limit = settings.auth_failure_limit
        self.secured = False
        self.checked = 0.0

    async def start(self, redis: Redis) -> None:
        """Decide the mode at start-up (and log it)."""
        self.secured = await TokenStore(redis).any()
        self.checked = time.monotonic()
        if self.secured:
            log.info("tokens required on every request")
        else:
            log.warning("open mode: no tokens exist; loopback hosts only, no cross-origin writes")

    async def look_for_tokens(self, redis: Redis) -> None:
        """Open mode looks for a first token every few seconds; once secured, always secured
        (fail closed)."""
        self.checked = time.monotonic()
        if await TokenStore(redis).any():
            self.secured = True
            log.info("a token exists now: tokens required on every request from here on")

    # -- checks ------------------------------------------------------------------------------

    @staticmethod
    def check_request_line(scope: Scope, headers: Headers) -> None:
        """What no route can answer: a path holding a NUL (no file or ref can) and a Host
        given twice (which one would count? RFC 9112 answers 400)."""
        if "\x00" in scope["path"]:
            raise BatonError("the path holds a NUL character", field="path")
        if len(headers.all(b"host")) > 1:
            raise Ambiguous("host", "given more than once; send it once")

    def allowed_host(self, host: str) -> bool:
        return host in self.allowed_hosts or host in LOOPBACK_NAMES or is_loopback(host)

    def check_open_request(self, scope: Scope, headers: Headers) -> None:
        """Open mode: only loopback (or allowed) Host names, no cross-origin writes."""
        host = headers.first(b"host")
        if host is not None and not self.allowed_host(_hostname(f"//{host}")):
            raise MisdirectedRequest(
                f"this server answers only loopback hosts in open mode, not {host}; add the "
                "name to BATON_ALLOWED_HOSTS or create a token"
            )
        origin = headers.first(b"origin")
        if (
            scope.get("method") in UNSAFE_METHODS
            and origin is not None
            and not self.allowed_host(_hostname(origin))
        ):
            raise Forbidden(f"cross-origin write from {origin} refused (open mode)")

    @staticmethod
    def check_media_type(scope: Scope, headers: Headers) -> None:
        if scope.get("method") not in UNSAFE_METHODS:
            return
        media = (headers.first(b"content-type") or "").split(";")[0].strip().lower()
        has_body = (
            headers.first(b"transfer-encoding") is not None
            or (headers.first(b"content-length") or "0") != "0"
        )
        if not media and not has_body:
            return
        handler = scope.get("route_handler")
        if handler is not None and handler.opt.get("form") and media in FORM_TYPES:
            return
        if media != "application/json" and not media.endswith("+json"):
            raise UnsupportedMediaType(
                f"send the body as application/json, not {media or 'without a content type'}"
            )

    async def credential(
        self, scope: Scope, headers: Headers, redis: Redis, secured: bool
    ) -> Credential:
        """What proves who is calling (see the module docstring)."""
        if len(headers.all(b"authorization")) > 1:  # which one would count? neither
            raise Ambiguous("authorization", "given more than once; send it once")
        secret = _bearer(headers)
        agentmemory = scope["path"].startswith(AGENTMEMORY)
        guards_secret = agentmemory and bool(self.agentmemory_secret)
        # An address over the limit guesses no more: its wrong tokens and any agentmemory
        # secret (chosen by a person, so guessable) wait. A valid Baton token (256 random
        # bits: never guessed) or login still passes, so a guesser sharing a client's
        # address (loopback, a proxy) cannot lock that client out.
        locked = await self.lockout(scope, redis) if secured or guards_secret else None
        if (
            guards_secret
            and locked is None
            and secret
            and hmac.compare_digest(secret.encode(), (self.agentmemory_secret or "").encode())
        ):
            return Credential(
                "agentmemory-secret", agent=self.agentmemory_agent, scopes=(self.default_namespace,)
            )
        if not secured:
            if guards_secret:
                if locked is not None:
                    raise locked
                if secret:  # a wrong secret is a failed login
                    await self.count_failure(scope, redis)
                raise Unauthorized("unauthorized")  # agentmemory says no more
            if agentmemory and not _loopback_client(scope):
                raise Unauthorized(
                    "unauthorized: set AGENTMEMORY_SECRET to allow non-loopback clients"
                )
            return OPEN
        tokens = TokenStore(redis)
        login = headers.cookie(LOGIN_COOKIE)
        if secret is None and login is None:
            raise Unauthorized("a token is required: Authorization: Bearer <token>")
        token = await (tokens.check(secret) if secret is not None else tokens.check_login(login))  # type: ignore[arg-type]
        if token is None:  # a wrong secret is a failed login; no secret at all is not
            if locked is not None:
                raise locked
            await self.count_failure(scope, redis)
            raise Unauthorized("unknown, revoked or expired token")
        if secret is None:
            check_same_origin(scope, headers)
        return Credential(
            "token",
            agent=token.agent,
            admin=token.admin,
            scopes=tuple(token.scopes),
            token_id=token.id,
        )

    async def lockout(self, scope: Scope, redis: Redis) -> TooManyFailures | None:
        """The 429 for a client address over the failed-login limit, or None."""
        if self.failure_limit is None:
            return None
        address = _client(scope)
        failures = await redis.get(auth_failures_key(address))
        if failures is None or int(failures) < self.failure_limit[0]:
            return None
        return TooManyFailures(
            f"too many failed logins from {address}; wait and retry",
            retry_after=max(1, await redis.ttl(auth_failures_key(address))),
        )

    async def count_failure(self, scope: Scope, redis: Redis) -> None:
        """Count a failed login against the client's address."""
        if self.failure_limit is None:
            return
        address = _client(scope)
        pipe = redis.pipeline(transaction=True)
        pipe.incr(auth_failures_key(address))
        pipe.expire(auth_failures_key(address), RATE_UNITS[self.failure_limit[1]], nx=True)
        await pipe.execute()

    def claims(self, scope: Scope, headers: Headers) -> Claims:
        raw_query = scope.get("query_string", b"")
        query = parse_qs(raw_query.decode("latin-1")) if raw_query else {}
        sessions = headers.all(SESSION_HEADER.encode())
        mcp_session = headers.first(b"mcp-session-id")
        handler = scope.get("route_handler")
        if not sessions and mcp_session and handler is not None and handler.opt.get("mcp"):
            sessions = (f"mcp-{mcp_session[:64]}",)  # each MCP connection is its own session
        return Claims(
            agents=headers.all(AGENT_HEADER.encode()),
            namespaces=headers.all(NAMESPACE_HEADER.encode()),
            query_namespaces=tuple(query.get("namespace", ())),
            sessions=sessions,
        )

    async def identify(self, scope: Scope, redis: Redis) -> Caller | None:
        """The caller of a request, None for the always-open paths; raises the refusal."""
        headers = Headers(scope["headers"])
        self.check_request_line(scope, headers)
        if not self.secured and time.monotonic() - self.checked > TOKENS_CHECK_SECONDS:
            await self.look_for_tokens(redis)
        secured = self.secured
        if not secured:
            self.check_open_request(scope, headers)
        self.check_media_type(scope, headers)
        path = scope["path"]
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return None
        credential = await self.credential(scope, headers, redis, secured)
        caller = resolve(credential, self.claims(scope, headers), self.default_namespace)
        if caller.session is not None:
            await check_session(redis, caller)
        return caller


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class Headers:
    """A request's raw headers, every value of a repeated one kept."""

    __slots__ = ("firsts", "raw")

    def __init__(self, raw: Any) -> None:
        self.raw: list[tuple[bytes, bytes]] = raw
        self.firsts: dict[bytes, bytes] = dict(reversed(raw))  # each name's first value

    def all(self, name: bytes) -> tuple[str, ...]:
        if name not in self.firsts:
            return ()
        return tuple(value.decode("latin-1") for key, value in self.raw if key == name)

    def first(self, name: bytes) -> str | None:
        value = self.firsts.get(name)
        return None if value is None else value.decode("latin-1")

    def cookie(self, name: str) -> str | None:
        for header in self.all(b"cookie"):
            for part in header.split(";"):
                key, _, value = part.strip().partition("=")
                if key == name and value:
                    return value
        return None


def check_same_origin(
    scope: Scope, headers: Headers, what: str = "a write with the dashboard's login cookie"
) -> None:
    """A write carried by the dashboard's login cookie, and a login itself, come from the
    dashboard's own pages: SameSite=Strict keeps other sites' pages out, not same-site ones
    (another port on localhost), and a login form posted by another site would sign the
    browser in as the other site's token (login CSRF); so an ``Origin`` naming another host
    or port is refused."""
    origin = headers.first(b"origin")
    if scope.get("method") not in UNSAFE_METHODS or origin is None:
        return
    host = (headers.first(b"host") or "").lower()
    if urlsplit(origin).netloc.lower() != host:
        raise Forbidden(f"{what} from {origin} refused")


def _bearer(headers: Headers) -> str | None:
    value = headers.first(b"authorization") or ""
    return value[7:].strip() or None if value.lower().startswith("bearer ") else None


@functools.lru_cache(maxsize=1024)
def _hostname(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def _loopback_client(scope: Scope) -> bool:
    client = _client(scope)
    return is_loopback(client) or client in LOOPBACK_NAMES  # test clients name themselves


@functools.lru_cache(maxsize=1024)
def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback IP address (cached: asked on every request)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# An error's extras that are answered as headers, not in the body.
HEADER_EXTRAS = {"retry_after": b"retry-after", "allow": b"allow"}


async def refuse(send: Send, scope: Scope, error: BatonError) -> None:
    """Answer a refusal before any handler runs: problem+json, or agentmemory's
    ``{"error": ...}`` on its routes."""
    status = error.status_code
    if scope["path"].startswith(AGENTMEMORY):
        message = error.detail
        if status == 401 and not message.startswith("unauthorized"):
            message = "unauthorized"  # agentmemory's own word for a wrong or missing secret
        body = json.dumps({"error": message}).encode()
        media = b"application/json"
    else:
        extra = {key: value for key, value in error.extra.items() if key not in HEADER_EXTRAS}
        body = json.dumps(
            {"status": status, "title": error.title, "detail": error.detail, **extra}
        ).encode()
        media = b"application/problem+json"
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", media),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="baton"'))
    for key, header in HEADER_EXTRAS.items():
        if key in error.extra:
            headers.append((header, str(error.extra[key]).encode()))
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": status,
        "headers": headers,
    }
    await send(start)
    await send({"type": "http.response.body", "body": body, "more_body": False})


def gate_middleware(app: ASGIApp) -> ASGIApp:
    """ASGI middleware running the :class:`Gate` of the application's state."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return
        state = scope["app"].state
        try:
            caller = await state.gate.identify(scope, state.backend.redis)
        except BatonError as error:
            await refuse(send, scope, error)
            return
        if caller is not None:
            set_caller(scope, caller)
            REQUEST_NAMESPACE.set(state.backend.namespace(caller.namespace))
        await app(scope, receive, send)

    return middleware
