"""The live dashboard: HTML pages rendered from the same views the JSON endpoints return,
and a Server-Sent Events stream fed by the store's activity stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import Cookie, ResponseHeader, State
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, FromQuery, Parameter
from litestar.response import Redirect, ServerSentEvent, ServerSentEventMessage, Template
from markupsafe import Markup

from baton.server.api.auth import (
    LOGIN_COOKIE,
    Gate,
    Headers,
    check_same_origin,
    require_admin,
)
from baton.server.api.deps import CallerDep, DashboardDep, HandoffsDep
from baton.server.api.event_streams import EventHub
from baton.server.api.problems import problems
from baton.server.model.errors import BatonError
from baton.server.model.identity import Caller
from baton.server.model.models import Contest
from baton.server.model.validation import check_moment
from baton.server.stores.dashboard import (
    ActivityView,
    ConfidencePoint,
    Dashboard,
    FailedView,
    MemoriesView,
    PacketView,
    PendingView,
    RecordView,
    SessionsView,
    SessionView,
    WebhooksView,
)
from baton.server.stores.tokens import LOGIN_SECONDS, TokenStore

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
STATIC = Path(__file__).resolve().parent.parent / "static"
# How long the event stream waits for an event before a keep-alive comment; and how often
# it asks the gate again whether its caller still may listen (a revoked token, an ended
# login or a session taken away stop the stream within this).
EVENT_WAIT_MS = 15_000
RECHECK_SECONDS = 5.0
CHART = {"width": 640, "height": 180, "pad": 24}


def duration(seconds: float | None) -> str:
    """12.3 -> "12s", 754 -> "12m 34s", 7300 -> "2h 1m"; a time already passed is "overdue"
    (the next sweep acts on it)."""
    if seconds is None:
        return "-"
    if seconds < 0:
        return "overdue"
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def chart(points: list[ConfidencePoint]) -> dict[str, Any]:
    """Coordinates for the inline SVG confidence chart (evenly spaced events, 0..1 up)."""
    width, height, pad = CHART["width"], CHART["height"], CHART["pad"]
    step = (width - 2 * pad) / max(len(points) - 1, 1)
    dots = [
        {
            "x": round(pad + index * step, 1),
            "y": round(height - pad - point.confidence * (height - 2 * pad), 1),
            "label": f"{point.cause}: {point.confidence:.0%}",
        }
        for index, point in enumerate(points)
    ]
    return {**CHART, "dots": dots, "line": " ".join(f"{d['x']},{d['y']}" for d in dots)}


@dataclass
class LoginForm:
    token: str


def _login_page(state: State, error: str | None, status_code: int = 200) -> Template:
    return Template(
        template_name="login.html",
        status_code=status_code,
        context={"error": error, "namespace": state.namespace, "path": "/login"},
    )


def when(stamp: str | None) -> Markup:
    """An ISO time as ``<time>``: "3 min ago" (or "in 5 min"), the exact UTC time on hover."""
    if not stamp:
        return Markup("-")
    at = datetime.fromisoformat(stamp)
    seconds = (datetime.now(UTC) - at).total_seconds()
    text = duration(abs(seconds))
    human = "just now" if abs(seconds) < 1 else (f"{text} ago" if seconds > 0 else f"in {text}")
    exact = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(stamp, exact, human)


def _moment(as_of: str | None) -> str | None:
    """The time control's ``as_of`` (empty: now), as Baton writes times."""
    return check_moment(as_of) if as_of else None


def contest(contested: Contest) -> Markup:
    """A contested record's badge: the versions written side by side, and their base."""
    versions = " and ".join(f"v{number}" for number in contested.versions)
    return Markup('<span class="badge stale" title="{}">contested</span>').format(
        f"{versions} were written without seeing each other, each on v{contested.base} or "
        "later; a write that names all of them in based_on, or an outcome, settles it"
    )


async def _page(
    name: str,
    view: Any,
    request: Request[Any, Any, Any],
    dashboard: Dashboard,
    caller: Caller,
    **extra: Any,
) -> Template:
    """A page, with the namespaces its caller may switch to for the picker."""
    namespaces = [each for each in await dashboard.namespaces() if caller.credential.allows(each)]
    if view.namespace not in namespaces:
        namespaces.append(view.namespace)
    return Template(
        template_name=name,
        context={
            "view": view,
            "namespace": view.namespace,
            "namespaces": namespaces,
            "path": request.url.path,
            "when": when,
            "duration": duration,
            "contest": contest,
            **extra,
        },
    )


class DashboardData(Controller):
    """JSON for every dashboard page: what the pages render from."""

    path = "/v1/dashboard"
    tags = ("dashboard",)

    @get(
        "/pending",
        summary="Queued and claimed packets per agent, stale pins computed now",
        responses=problems(),
    )
    async def pending(self, dashboard: DashboardDep) -> PendingView:
        return await dashboard.pending()

    @get(
        "/handoffs/{packet_id:str}",
        summary="One packet: pins pinned vs current, its log",
        responses=problems(404),
    )
    async def packet(
        self, packet_id: FromPath[str], dashboard: DashboardDep, as_of: FromQuery[str | None] = None
    ) -> PacketView:
        return await dashboard.packet(packet_id, _moment(as_of))

    @get(
        "/records/{ref:path}",
        summary="A record's versions, chain status, confidence over time",
        responses=problems(404),
    )
    async def record(
        self, ref: FromPath[str], dashboard: DashboardDep, as_of: FromQuery[str | None] = None
    ) -> RecordView:
        return await dashboard.record(ref.lstrip("/"), _moment(as_of))

    @get("/failed", summary="Failed and expired packets with their reason", responses=problems())
    async def failed(self, dashboard: DashboardDep) -> FailedView:
        return await dashboard.failed()

    @get("/webhooks", summary="Agents' webhooks and their deliveries", responses=problems())
    async def webhooks(self, dashboard: DashboardDep) -> WebhooksView:
        return await dashboard.webhooks()

    @get(
        "/activity",
        summary="Recent writes, handoffs and outcomes, newest first",
        responses=problems(),
    )
    async def activity(
        self, dashboard: DashboardDep, limit: Annotated[int, Parameter(ge=1, le=500)] = 50
    ) -> ActivityView:
        return await dashboard.activity(limit)

    @get("/sessions", summary="Recent sessions, or the memories and observations matching q")
    async def sessions(
        self, dashboard: DashboardDep, q: FromQuery[str | None] = None
    ) -> SessionsView:
        return await dashboard.sessions(q)

    @get(
        "/sessions/{session_id:str}",
        summary="One session: its observations and the memories drawn from them",
        responses=problems(404),
    )
    async def session(self, session_id: FromPath[str], dashboard: DashboardDep) -> SessionView:
        return await dashboard.session(session_id)

    @get("/memories", summary="The latest memories, newest first, or those matching q")
    async def memories(
        self, dashboard: DashboardDep, q: FromQuery[str | None] = None
    ) -> MemoriesView:
        return await dashboard.memories(q)

    @get("/events", include_in_schema=False)  # a text/event-stream, see docs/dashboard.md
    async def events(
        self, caller: CallerDep, state: State, request: Request[Any, Any, Any]
    ) -> ServerSentEvent:
        grants = state.backend.namespace(caller.namespace).grants
        await grants.operators_only(caller, "the event stream")
        hub: EventHub = state.events
        owner = caller.credential.token_id or f"agent:{caller.agent}"
        subscription = hub.subscribe(caller.namespace, owner)
        queue = await subscription.__aenter__()  # before the response: 429 beyond the cap
        scope, gate, redis = request.scope, state.gate, state.backend.redis

        async def still_allowed() -> bool:
            try:
                await gate.identify(scope, redis)
                await grants.operators_only(caller, "the event stream")  # grants set since
            except BatonError:
                return False
            return True

        async def stream() -> AsyncIterator[ServerSentEventMessage]:
            loop = asyncio.get_running_loop()
            checked = waited = loop.time()
            try:
                yield ServerSentEventMessage(comment="connected", data=None)
                while True:
                    try:
                        event = await asyncio.wait_for(queue.get(), RECHECK_SECONDS)
                    except TimeoutError:
                        event = None
                    if loop.time() - checked >= RECHECK_SECONDS:
                        if not await still_allowed():
                            return
                        checked = loop.time()
                    if event is not None:
                        yield ServerSentEventMessage(
                            data=msgspec.json.encode(event).decode(), event=event.kind, id=event.id
                        )
                        waited = loop.time()
                    elif loop.time() - waited >= EVENT_WAIT_MS / 1000:
                        yield ServerSentEventMessage(comment="keep-alive", data=None)
                        waited = loop.time()
            finally:
                await subscription.__aexit__(None, None, None)

        return ServerSentEvent(stream())


class DashboardPages(Controller):
    """The HTML pages. No other site may show them in a frame (clickjacking: a page of
    theirs over Baton's buttons), by CSP and, for older browsers, X-Frame-Options."""

    include_in_schema = False
    response_headers = [  # noqa: RUF012 (Litestar reads the class attribute)
        ResponseHeader(name="Content-Security-Policy", value="frame-ancestors 'none'"),
        ResponseHeader(name="X-Frame-Options", value="DENY"),
    ]

    @get("/", name="pending")
    async def pending(
        self,
        request: Request[Any, Any, Any],
        dashboard: DashboardDep,
        caller: CallerDep,
        partial: FromQuery[bool] = False,
    ) -> Template:
        view = await dashboard.pending()
        name = "_pending.html" if partial else "pending.html"
        return await _page(name, view, request, dashboard, caller)

    @get("/handoffs/{packet_id:str}", name="packet")
    async def packet(
        self,
        packet_id: FromPath[str],
        request: Request[Any, Any, Any],
        dashboard: DashboardDep,
        caller: CallerDep,
        as_of: FromQuery[str | None] = None,
    ) -> Template:
        view = await dashboard.packet(packet_id, _moment(as_of))
        return await _page("packet.html", view, request, dashboard, caller)

    @get("/records/{ref:path}", name="record")
    async def record(
        self,
        ref: FromPath[str],
        request: Request[Any, Any, Any],
        dashboard: DashboardDep,
        caller: CallerDep,
        as_of: FromQuery[str | None] = None,
    ) -> Template:
        view = await dashboard.record(ref.lstrip("/"), _moment(as_of))
        return await _page(
            "record.html", view, request, dashboard, caller, chart=chart(view.confidence)
        )

    @get("/failed", name="failed")
    async def failed(
        self, request: Request[Any, Any, Any], dashboard: DashboardDep, caller: CallerDep
    ) -> Template:
        return await _page("failed.html", await dashboard.failed(), request, dashboard, caller)

    @get("/webhooks", name="webhooks")
    async def webhooks(
        self, request: Request[Any, Any, Any], dashboard: DashboardDep, caller: CallerDep
    ) -> Template:
        view = await dashboard.webhooks()
        return await _page("webhooks.html", view, request, dashboard, caller)

    @get("/login", name="login")
    async def login_form(self, state: State) -> Template:
        return _login_page(state, None)

    @post("/login", name="login-submit", opt={"form": True}, status_code=303)
    async def login(
        self,
        request: Request[Any, Any, Any],
        state: State,
        data: Annotated[LoginForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
    ) -> Response[Any]:
        """Trade a token for a login cookie (opaque, HttpOnly, SameSite=Strict, Secure over
        https): the token itself never sits in the browser or a URL."""
        check_same_origin(request.scope, Headers(request.scope["headers"]), "a login")
        gate: Gate = state.gate
        redis = state.backend.redis
        locked = await gate.lockout(request.scope, redis)  # a valid token still passes
        tokens = TokenStore(redis)
        token = await tokens.check(data.token.strip())
        if token is None:
            if locked is not None:
                raise locked
            await gate.count_failure(request.scope, redis)
            return _login_page(state, "Unknown, revoked or expired token.", status_code=401)
        secret = await tokens.login(token)
        cookie = Cookie(
            key=LOGIN_COOKIE,
            value=secret,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
            max_age=LOGIN_SECONDS,
        )
        return Redirect("/", status_code=303, cookies=[cookie])

    @post("/logout", name="logout", opt={"form": True}, status_code=303)
    async def logout(self, request: Request[Any, Any, Any], state: State) -> Redirect:
        secret = request.cookies.get(LOGIN_COOKIE)
        if secret:
            await TokenStore(state.backend.redis).logout(secret)
        return Redirect(
            "/login",
            status_code=303,
            cookies=[Cookie(key=LOGIN_COOKIE, value="", max_age=0, path="/")],
        )

    @get("/activity", name="activity")
    async def activity(
        self, request: Request[Any, Any, Any], dashboard: DashboardDep, caller: CallerDep
    ) -> Template:
        view = await dashboard.activity(100)
        return await _page("activity.html", view, request, dashboard, caller)

    @get("/sessions", name="sessions")
    async def sessions(
        self,
        request: Request[Any, Any, Any],
        dashboard: DashboardDep,
        caller: CallerDep,
        q: FromQuery[str | None] = None,
    ) -> Template:
        view = await dashboard.sessions(q)
        return await _page("sessions.html", view, request, dashboard, caller)

    @get("/sessions/{session_id:str}", name="session")
    async def session(
        self,
        session_id: FromPath[str],
        request: Request[Any, Any, Any],
        dashboard: DashboardDep,
        caller: CallerDep,
    ) -> Template:
        view = await dashboard.session(session_id)
        return await _page("session.html", view, request, dashboard, caller)

    @get("/memories", name="memories")
    async def memories(
        self,
        request: Request[Any, Any, Any],
        dashboard: DashboardDep,
        caller: CallerDep,
        q: FromQuery[str | None] = None,
    ) -> Template:
        view = await dashboard.memories(q)
        return await _page("memories.html", view, request, dashboard, caller)

    @post("/handoffs/{packet_id:str}/requeue", name="requeue", opt={"form": True})
    async def requeue(
        self, packet_id: FromPath[str], handoffs: HandoffsDep, caller: CallerDep
    ) -> Redirect:
        """The failed page's requeue button (a plain form, so it works without JavaScript)."""
        require_admin(caller, "requeue")
        await handoffs.requeue(packet_id, caller.agent)
        await handoffs.ns.durable()
        return Redirect(f"/failed?namespace={handoffs.namespace}")
