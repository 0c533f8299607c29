"""``/metrics`` in Prometheus format: request counts and latencies per route (see
``observability.py``), plus Baton's own gauges refreshed at every scrape."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Gauge, generate_latest

from baton.server.api.deps import CallerDep
from baton.server.api.observability import RequestMetrics
from baton.server.model.errors import Forbidden
from baton.server.model.keys import NAMESPACES

PACKETS = Gauge(
    "baton_packets", "Handoff packets by receiving agent and state", ["namespace", "agent", "state"]
)
QUEUE_DEPTH = Gauge(
    "baton_rq_queue_depth", "Jobs waiting in each agent's RQ queue", ["namespace", "agent"]
)

# Request counts and latencies, filled by the observability middleware.
REQUESTS = RequestMetrics()
REGISTRY.register(REQUESTS)


class MetricsController(Controller):
    path = "/metrics"
    include_in_schema = False

    @get()
    async def metrics(self, request: Request[Any, Any, Any], caller: CallerDep) -> Response[bytes]:
        """Refresh Baton's gauges from the store, then render the whole registry. They span
        every namespace (agents, packet counts): a token limited to some namespaces is
        refused."""
        if "*" not in caller.credential.scopes:
            raise Forbidden(
                "/metrics covers every namespace; scrape it with a token not limited to namespaces"
            )
        backend = request.app.state.backend
        for raw in sorted(await backend.redis.smembers(NAMESPACES)):
            namespace = raw.decode()
            for summary in await backend.namespace(namespace).handoffs.agents():
                for state in ("queued", "claimed", "failed"):
                    PACKETS.labels(namespace, summary.agent, state).set(getattr(summary, state))
                if backend.dispatcher is not None:
                    depth = await backend.dispatcher.depth(namespace, summary.agent)
                    QUEUE_DEPTH.labels(namespace, summary.agent).set(depth)
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
