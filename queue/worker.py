"""Starting RQ workers: one per agent (push mode) and the maintenance worker (sweeps)."""

from __future__ import annotations

import functools
import importlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType

import structlog
from rq import Queue
from rq.cron import CronScheduler
from rq.worker import SimpleWorker, WorkerStatus

from baton.agents.agent_runtime import handler_for, registered
from baton.queue.dispatch import MAINTENANCE_QUEUE, SWEEP
from baton.queue.jobs import sweep
from baton.queue.worker_context import worker_context
from baton.server.connection import queue_url, sync_redis
from baton.server.keys import queue_name
from baton.server.settings import Settings

log = structlog.get_logger("baton.worker")
EXIT_STOPPED = 143  # 128 + SIGTERM: stopped by a signal, its handler cut short
ORPHAN_CHECK_SECONDS = 1.0


class AgentWorker(SimpleWorker):
    """RQ's SimpleWorker (jobs run in the worker process itself: no fork per job, and the
    process keeps its event loop and Redis connections between jobs; leases, not a work
    horse, protect a packet whose worker dies), with a bounded stop: on SIGTERM the running
    handler may finish within ``stop_seconds``; past that its packet goes back to its queue
    (redelivered at once instead of after its lease) and the process exits."""

    stop_seconds: float = 30.0

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        if self.get_state() == WorkerStatus.BUSY:
            threading.Thread(target=self._stop_after_grace, name="baton-stop", daemon=True).start()
        super().request_stop(signum, frame)  # type: ignore[no-untyped-call]  # unannotated in rq

    def _stop_after_grace(self) -> None:
        time.sleep(self.stop_seconds)
        packet = worker_context().give_back(
            f"worker stopped: its handler ran past the {self.stop_seconds:g} s stop grace"
        )
        log.warning("stop grace over: packet given back, exiting", packet=packet)
        os._exit(EXIT_STOPPED)


WORKER_CLASS = AgentWorker


@functools.cache
def _forked_children_stop_with_the_worker() -> None:
    """Make every process this worker forks stop once the worker is gone. RQ forks its
    scheduler (``with_scheduler``) and runs it until told to stop: a worker that dies
    without stopping it (SIGKILL, the OOM killer, the stop grace's ``os._exit``) would leave
    it running for ever, heart-beating and holding its queues' scheduler locks."""
    os.register_at_fork(after_in_child=_stop_when_orphaned)


def _stop_when_orphaned() -> None:
    """In a forked child: SIGTERM itself once its parent is gone (RQ's scheduler then stops
    cleanly, releasing its locks; a process without a handler just ends)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_CHECK_SECONDS)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="baton-orphan-watch", daemon=True).start()


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
    """Import the modules that register handlers, looked up in the current directory first
    (as ``python -m`` and ``rq worker --path .`` do; a console script would not)."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
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
    worker.stop_seconds = settings.stop_seconds
    _forked_children_stop_with_the_worker()
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
    _forked_children_stop_with_the_worker()
    try:
        return worker.work(with_scheduler=True)
    finally:
        stop.set()


def _tick(cron: CronScheduler, stop: threading.Event) -> None:
    """RQ's CronScheduler loop without its signal handlers (the worker owns the signals)."""
    while not stop.is_set():
        cron.enqueue_jobs()
        stop.wait(cron.calculate_sleep_interval())
