"""What every HTTP request leaves behind: its count and latency for ``/metrics``, and an
access-log line when it failed or was slow (``BATON_ACCESS_LOG=all`` logs every request).

One pure-ASGI middleware does both, at the cost of a few dictionary updates per request:
the counts are plain numbers, turned into Prometheus metrics only when ``/metrics`` is
scraped (a middleware calling prometheus_client per request cost ~15 % of a request's CPU).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator

import structlog
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from baton.server.api.problems import answer_error
from baton.server.model.identity import CALLER
from baton.server.runtime.settings import AccessLog

log = structlog.get_logger("baton.access")
# A request this slow is logged even when it succeeded.
SLOW_SECONDS = 1.0
# Prometheus' default latency buckets, in seconds.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
# Left out of the request metrics: the scrape itself and the endless dashboard stream.
UNMEASURED = frozenset({"/metrics", "/v1/dashboard/events"})
LABELS = ("method", "path", "status_code", "app_name")


class RequestMetrics(Collector):
    """Request counts and latency histograms per method, route template and status."""

    def __init__(self) -> None:
        # (method, route, status) -> [count, total seconds, per-bucket counts (+Inf last)]
        self.series: dict[tuple[str, str, int], tuple[list[float], list[int]]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        entry = self.series.get(key)
        if entry is None:
            entry = self.series[key] = ([0.0, 0.0], [0] * (len(BUCKETS) + 1))
        totals, buckets = entry
        totals[0] += 1
        totals[1] += seconds
        buckets[bisect_left(BUCKETS, seconds)] += 1

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("baton_requests", "Total requests", labels=LABELS)
        durations = HistogramMetricFamily(
            "baton_request_duration_seconds", "Request duration, in seconds", labels=LABELS
        )
        for (method, route, status), (totals, buckets) in sorted(self.series.items()):
            labels = [method, route, str(status), "baton"]
            requests.add_metric(labels, totals[0])
            cumulative, running = [], 0
            for bound, count in zip([*map(str, BUCKETS), "+Inf"], buckets, strict=True):
                running += count
                cumulative.append((bound, float(running)))
            durations.add_metric(labels, cumulative, totals[1])
        yield requests
        yield durations


def route_of(scope: Scope) -> str:
    """The route template a request matched (``/v1/records/{ref}``); a mounted app's mount
    path (``/mcp``); "unmatched" for none."""
    template = scope.get("path_template")
    if template and template != "/":
        return str(template)
    handler = scope.get("route_handler")
    paths = getattr(handler, "paths", None)
    return str(next(iter(sorted(paths)))) if paths else "unmatched"


def observe_requests(
    metrics: RequestMetrics, access_log: AccessLog
) -> Callable[[ASGIApp], ASGIApp]:
    """The middleware factory for ``metrics`` and the ``access_log`` policy."""

    def middleware(app: ASGIApp) -> ASGIApp:
        async def observed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP:
                await app(scope, receive, send)
                return
            started = time.perf_counter()
            status = 500
            streaming = False
            path = scope["path"]  # before the app runs: a mounted app (/mcp) shortens it

            started_response = False

            async def send_and_watch(message: Message) -> None:
                nonlocal status, streaming, started_response
                if message["type"] == "http.response.start":
                    status, started_response = message["status"], True
                    streaming = scope["method"] == "GET" and any(
                        name == b"content-type" and value.startswith(b"text/event-stream")
                        for name, value in message.get("headers", ())
                    )
                await send(message)

            try:
                await app(scope, receive, send_and_watch)
            except Exception as error:
                # Raised by a middleware (the gate), outside the routes' exception handling:
                # answer it here, as the handlers would, so the log holds the status sent.
                if started_response:
                    raise
                await answer_error(scope, receive, send_and_watch, error)
            finally:
                seconds = time.perf_counter() - started
                # A GET stream (the dashboard's, an MCP session's) lasts as long as its
                # client: neither a latency nor slow. (An MCP POST answered as SSE is short.)
                if path not in UNMEASURED and not streaming:
                    metrics.observe(scope["method"], route_of(scope), status, seconds)
                slow = seconds >= SLOW_SECONDS and not streaming
                if access_log == "all" or (access_log == "errors" and (status >= 400 or slow)):
                    caller = scope.get("state", {}).get(CALLER)
                    log.info(
                        "request",
                        method=scope["method"],
                        path=path,
                        status=status,
                        duration_ms=round(seconds * 1000, 2),
                        agent=None if caller is None else caller.agent,
                    )

        return observed

    return middleware
