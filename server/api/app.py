"""The Litestar application factory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import timedelta
from importlib.metadata import version
from typing import Any, cast

import msgspec
import redis.exceptions
import structlog
from litestar import Litestar, Request, asgi, get
from litestar.datastructures import State
from litestar.middleware.rate_limit import RateLimitConfig
from litestar.openapi.config import OpenAPIConfig
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.stores.redis import RedisStore
from litestar.template.config import TemplateConfig
from litestar.types import ASGIApp, Receive, Scope, Send
from mcp.server.transport_security import TransportSecuritySettings

from baton.agents.hook import Baton, flush
from baton.agents.spool import Busy, Spool, Unreachable
from baton.queue.notifier import Notifier
from baton.queue.sweeps import sweep_forever
from baton.server.api.agentmemory_routes import AgentMemoryController, operation_router
from baton.server.api.allow import AllowEveryMethod
from baton.server.api.auth import Gate, caller_of, gate_middleware
from baton.server.api.checkpoint_routes import CheckpointController
from baton.server.api.dashboard_routes import (
    STATIC,
    TEMPLATES,
    DashboardData,
    DashboardPages,
)
from baton.server.api.deps import DEPENDENCIES, CallerDep
from baton.server.api.event_streams import EventHub
from baton.server.api.mcp_sessions import SessionTable
from baton.server.api.metrics import REQUESTS, MetricsController
from baton.server.api.notice_routes import NoticeStream
from baton.server.api.observability import observe_requests
from baton.server.api.openapi_bodies import (
    JsonWithExactBodies,
    SwaggerWithExactBodies,
)
from baton.server.api.operation_routes import rest_handlers
from baton.server.api.problems import EXCEPTION_HANDLERS, problems
from baton.server.maintenance.checkpoints import SeenCheckpoints
from baton.server.mcp.mcp_server import Binding, create_mcp_server
from baton.server.model.clock import utc_now
from baton.server.model.endpoint import base_url
from baton.server.model.errors import StoreUnavailable
from baton.server.model.identity import CALLER, Caller
from baton.server.model.keys import RATE_LIMIT_NAMESPACE, READY_PROBE
from baton.server.runtime.connection import async_redis, embedded_server, redis_url, write_refused
from baton.server.runtime.embedded import memory_full, supervise
from baton.server.runtime.logs import configure_logging
from baton.server.runtime.serving import settled
from baton.server.runtime.settings import Settings
from baton.server.runtime.signing import load_signing_key
from baton.server.stores.backend import Backend, open_backend

BODY_OVERHEAD = 64 * 1024

log = structlog.get_logger("baton.api")


@get("/healthz", tags=["operations"], summary="The process is up", responses=problems())
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


class WhoAmI(msgspec.Struct, kw_only=True):
    """The identity a request resolves to under Baton's rules (docs/operations.md)."""

    agent: str
    namespace: str
    session: str | None
    admin: bool
    credential: str
    token_id: str | None


@get("/v1/whoami", tags=["operations"], summary="Who this request acts as", responses=problems())
async def whoami(caller: CallerDep) -> WhoAmI:
    return WhoAmI(
        agent=caller.agent,
        namespace=caller.namespace,
        session=caller.session,
        admin=caller.admin,
        credential=caller.credential.kind,
        token_id=caller.credential.token_id,
    )


async def _rate_limited(request: Request[Any, Any, Any]) -> bool:
    """Whether the request counts against a token's rate limit (open mode has no tokens).
    A coroutine: Litestar runs a plain function given as its throttle check in a thread,
    a thread hop on every request."""
    caller: Caller | None = request.scope.get("state", {}).get(CALLER)
    return caller is not None and caller.credential.token_id is not None


@get(
    "/readyz",
    tags=["operations"],
    summary="Redis answers, accepts writes, and the scripts are loaded",
    responses=problems(),
)
async def readyz(state: State) -> dict[str, Any]:
    """Ready means writes would succeed: a probe key is written (a full disk or an out of
    memory Redis answers 507/503 here, as it does for every write), and Redis has room for
    a write of the largest value allowed (a small probe still fits where it does not)."""
    backend: Backend = state.backend
    loaded = await backend.scripts.load(backend.redis)
    await backend.redis.set(READY_PROBE, utc_now(), ex=60)
    largest_write = 2 * backend.limits.max_value_bytes  # read in, then stored
    full = memory_full(await backend.redis.info("memory"), largest_write)
    if full is not None:
        raise StoreUnavailable(f"Baton's Redis is {full}")
    return {"status": "ready", "scripts": loaded}


# What `baton serve --workers N` hands to uvicorn: each worker builds its app from BATON_*.
APP_FACTORY = "baton.server.api.app:create_worker_app"


def create_worker_app() -> Litestar:
    """The app of one ``baton serve --workers N`` process, set to settle its heap once
    started (:func:`~baton.server.runtime.serving.settled`), as ``baton serve`` does with one."""
    return settled(create_app())


def deliver_kept(settings: Settings) -> None:
    """Open mode: send what hooks kept in this data dir's spool for this server's own URL
    without a token (a spool holds only the calls recorded for its URL and token), once this
    server answers."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(settings.host, settings.host)
    url = base_url(None, f"[{host}]" if ":" in host else host, settings.port)
    spool = Spool(str(settings.data_dir), url)
    if not spool.pending():
        return
    try:
        delivered = flush(Baton(url, None, None), spool, 30)
    except (Unreachable, Busy, OSError) as error:
        log.warning("hook events kept in the spool wait for the next hook", error=str(error))
    else:
        log.info("hook events kept while no server answered delivered", calls=delivered)


class CountingStore(RedisStore):
    """The rate limit's Redis store. Counting requests is bookkeeping: while Redis refuses
    writes (a full disk, out of memory) a count is not stored and the request goes on, so
    reads keep working; requests are not limited for that time."""

    async def set(
        self, key: str, value: str | bytes, expires_in: int | timedelta | None = None
    ) -> None:
        try:
            await super().set(key, value, expires_in)
        except redis.exceptions.ResponseError as error:
            if write_refused(error) is None:
                raise


def create_app(settings: Settings | None = None) -> Litestar:
    """Build the API. Redis is connected at start-up (the embedded one unless configured)."""
    settings = settings or Settings.from_env()
    configure_logging()  # here too: `baton serve --workers N` builds the app in fresh processes

    binding = Binding()
    gate = Gate(settings)
    signing_key = load_signing_key(settings)
    url = redis_url(settings)  # the embedded server starts here unless BATON_REDIS_URL is set
    middleware: list[Any] = [observe_requests(REQUESTS, settings.access_log), gate_middleware]
    stores: dict[str, Any] = {}
    if settings.rate_limit is not None:
        count, unit = settings.rate_limit
        limiter = RateLimitConfig(
            rate_limit=(unit, count),  # type: ignore[arg-type]
            identifier_for_request=lambda request: str(
                caller_of(request.scope).credential.token_id
            ),
            check_throttle_handler=_rate_limited,
            store="rate_limit",
        )
        middleware.append(limiter.middleware)
        stores["rate_limit"] = CountingStore(
            async_redis(url), namespace=RATE_LIMIT_NAMESPACE, handle_client_shutdown=True
        )
    mcp = create_mcp_server(binding)
    max_body = settings.limits.max_value_bytes + BODY_OVERHEAD
    # Stateless: any process serves any request; the sessions are the table's, in Redis
    # (docs/mcp.md). Host and Origin checks are the gate's, the same on every surface.
    # A Starlette app: plain ASGI, though Starlette's types spell scope and messages as
    # MutableMappings where Litestar's are TypedDicts.
    mcp_app = cast(
        "ASGIApp",
        mcp.streamable_http_app(
            streamable_http_path="/",
            stateless_http=True,
            json_response=True,
            host=settings.host,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=max_body,
        ),
    )
    sessions = SessionTable(
        lambda: binding.backend, settings.mcp_sessions, settings.mcp_idle_seconds, max_body
    )
    guarded_mcp_app = sessions.guard(mcp_app)

    @asgi("/mcp", is_mount=True, copy_scope=True, opt={"mcp": True})
    async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        await guarded_mcp_app(scope, receive, send)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with open_backend(replace(settings, redis_url=url)) as backend:
            app.state.backend = binding.backend = backend
            await gate.start(backend.redis)
            events_client = async_redis(url)  # the event hub's own: never the request pool's
            app.state.events = hub = EventHub(events_client, settings.max_streams)
            background = [asyncio.create_task(sweep_forever(backend, settings, signing_key))]
            notices_client = async_redis(url)  # the notifier's waiting read: not the pool's
            if settings.notices:
                notifier = Notifier(backend, notices_client)
                background.append(asyncio.create_task(notifier.run_forever()))
            if not settings.redis_url:  # Baton started the embedded server: keep it up
                background.append(asyncio.create_task(supervise(embedded_server(settings))))
            if not gate.secured:
                background.append(asyncio.create_task(asyncio.to_thread(deliver_kept, settings)))
            try:
                # A mounted app's own lifespan never runs: run the MCP session manager here.
                async with mcp.session_manager.run():
                    yield
            finally:
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
                await hub.close()
                await events_client.aclose()
                await notices_client.aclose()

    return Litestar(
        route_handlers=[
            *rest_handlers(),
            AgentMemoryController,
            operation_router(),
            CheckpointController,
            DashboardData,
            DashboardPages,
            MetricsController,
            NoticeStream,
            healthz,
            readyz,
            whoami,
            mcp_endpoint,
            create_static_files_router(
                path="/static", directories=[STATIC], include_in_schema=False
            ),
        ],
        template_config=TemplateConfig(directory=TEMPLATES, engine=JinjaTemplateEngine),
        dependencies=DEPENDENCIES,
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=middleware,
        stores=stores,
        lifespan=[lifespan],
        state=State(
            {
                "namespace": settings.namespace,
                "mcp": mcp,
                "gate": gate,
                "signing_key": signing_key,
                "checkpoints_seen": SeenCheckpoints.of(settings.data_dir),
            }
        ),
        request_max_body_size=max_body,
        openapi_config=OpenAPIConfig(
            title="Baton",
            version=version("baton-server"),
            description="Versioned, hash-chained shared memory and handoffs for AI agents.",
            path="/schema",
            render_plugins=[  # the first is also served at /schema itself
                SwaggerWithExactBodies(
                    path="/swagger",
                    js_url="/static/swagger-ui-bundle.js",
                    css_url="/static/swagger-ui.css",
                    standalone_preset_js_url="/static/swagger-ui-standalone-preset.js",
                    favicon="",
                ),
                JsonWithExactBodies(),
            ],
        ),
        before_send=[AllowEveryMethod()],
        logging_config=None,
    )
