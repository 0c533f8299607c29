"""Starting RQ workers: one per agent (push mode) and the maintenance worker (sweeps)."""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Sequence

from baton.agents.runtime import handler_for, registered
from baton.queue.dispatch import MAINTENANCE_QUEUE, SWEEP, queue_name
from baton.queue.jobs import sweep
from baton.server.connection import queue_url, sync_redis
from baton.server.settings import Settings
from rq import Queue
from rq.cron import CronScheduler
from rq.worker import SimpleWorker

# SimpleWorker runs jobs in the worker process itself: no fork per job, and the process
# keeps its event loop and Redis connections between jobs. Leases, not the work horse,
# protect a packet whose worker dies.
WORKER_CLASS = SimpleWorker


class AgentNotRegistered(LookupError):
    """``baton agent run NAME`` found no handler for NAME in the modules it imported."""


def _rq_logs_to_stderr() -> None:
    """RQ logs to stdout by default; stdout belongs to the agent (its transcript, or MCP)."""
    rq_logger = logging.getLogger("rq")
    if not rq_logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s", "%H:%M:%S"))
        rq_logger.addHandler(handler)
        rq_logger.setLevel(logging.INFO)


def import_handlers(modules: Sequence[str]) -> None:
    for module in modules:
        importlib.import_module(module)


def run_agent(
    settings: Settings, name: str, modules: Sequence[str], *, burst: bool = False
) -> bool:
    """Work ``name``'s queue until stopped (or, with ``burst``, until it is empty)."""
    import_handlers(modules)
    if handler_for(name) is None:
        known = ", ".join(registered()) or "none"
        raise AgentNotRegistered(
            f"no handler for agent {name!r} (registered: {known}); pass the module that "
            "defines it with --module, or set BATON_AGENT_MODULES"
        )
    _rq_logs_to_stderr()
    connection = sync_redis(queue_url(settings))
    queue = Queue(queue_name(settings.namespace, name), connection=connection)
    worker = WORKER_CLASS([queue], connection=connection)
    return worker.work(burst=burst, with_scheduler=True)


def run_maintenance(settings: Settings, *, burst: bool = False) -> bool:
    """Run the periodic sweeps: RQ's cron scheduler enqueues :func:`sweep` every
    ``BATON_SWEEP_SECONDS`` and this worker runs it."""
    _rq_logs_to_stderr()
    connection = sync_redis(queue_url(settings))
    queue = Queue(MAINTENANCE_QUEUE, connection=connection)
    worker = WORKER_CLASS([queue], connection=connection)
    if burst:
        queue.enqueue(SWEEP)
        return worker.work(burst=True)
    cron = CronScheduler(connection)
    cron.register(sweep, MAINTENANCE_QUEUE, interval=settings.handoffs.sweep_seconds)
    stop = threading.Event()
    threading.Thread(target=_tick, args=(cron, stop), name="baton-cron", daemon=True).start()
    try:
        return worker.work(with_scheduler=True)
    finally:
        stop.set()


def _tick(cron: CronScheduler, stop: threading.Event) -> None:
    """RQ's CronScheduler loop without its signal handlers (the worker owns the signals)."""
    while not stop.is_set():
        cron.enqueue_jobs()
        stop.wait(cron.calculate_sleep_interval())
