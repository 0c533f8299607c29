"""Starting RQ workers: one per agent (push mode) and the maintenance worker (sweeps)."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

import structlog
from redis.client import PubSubWorkerThread
from redis.exceptions import RedisError
from rq import Queue
from rq.job import Job, JobStatus
from rq.results import Result
from rq.scheduler import RQScheduler
from rq.worker import SimpleWorker, WorkerStatus

from baton.agents.agent_runtime import handler_for, registered
from baton.queue.dispatch import FAILURE_TTL, MAINTENANCE_QUEUE, RESULT_TTL
from baton.queue.job_guard import JOB_SERIALIZER, SWEEP, BatonJob, queued_before_json, refusal
from baton.queue.worker_context import worker_context
from baton.server.model.keys import queue_name
from baton.server.runtime.connection import queue_url, sync_redis
from baton.server.runtime.logs import configure_logging
from baton.server.runtime.settings import Settings

log = structlog.get_logger("baton.worker")
EXIT_STOPPED = 143  # 128 + SIGTERM: stopped by a signal, its handler cut short


class AgentWorker(SimpleWorker):
    """RQ's SimpleWorker (jobs run in the worker process itself: no fork per job, and the
    process keeps its event loop and Redis connections between jobs; leases, not a work
    horse, protect a packet whose worker dies), with a bounded stop: on SIGTERM the running
    handler may finish within ``stop_seconds``; past that its packet goes back to its queue
    (redelivered at once instead of after its lease) and the process exits. It runs only
    Baton's own jobs (``baton.queue.job_guard``)."""

    stop_seconds: float = 3.0
    stopping = False  # asked to stop (a signal): not to be started again

    def execute_job(self, job: Job, queue: Queue) -> None:
        reason = refusal(job)
        if reason is None:
            super().execute_job(job, queue)
            return
        if queued_before_json(job):
            log.warning(
                "job queued before Baton's queues took JSON dropped unrun; the sweep queues "
                "its packet again",
                job=job.id,
                queue=queue.name,
            )
            with self.connection.pipeline() as pipeline:  # its keys only: nothing of it is read
                pipeline.delete(job.key, Result.get_key(job.id))  # type: ignore[no-untyped-call]
                pipeline.lrem(queue.intermediate_queue_key, 1, job.id)
                pipeline.execute()
            return
        log.error("job refused, nothing of it ran", job=job.id, queue=queue.name, reason=reason)
        refused = f"refused by Baton: {reason}"
        with self.connection.pipeline() as pipeline:
            job.set_status(JobStatus.FAILED, pipeline=pipeline)
            queue.failed_job_registry.add(
                job, ttl=FAILURE_TTL, exc_string=refused, pipeline=pipeline
            )
            Result.create_failure(
                job, FAILURE_TTL, exc_string=refused, worker_name=self.name, pipeline=pipeline
            )
            pipeline.lrem(queue.intermediate_queue_key, 1, job.id)
            pipeline.execute()

    def unsubscribe(self) -> None:
        """RQ's, reordered so it never waits on its own pubsub thread: RQ 3 reads the
        worker's command channel with a 60 s timeout and, on stop, unsubscribes first and
        then joins the thread without a bound (redis-py 8). A thread that read the
        unsubscribe reply before being told to stop went on waiting up to 60 s for a
        subscription, and so did the worker's exit. Here the thread is told first; the
        unsubscribe reply wakes it and it ends; it is waited on for a second at most (it is
        a daemon thread)."""
        # RQ leaves the attribute unannotated (its type is inferred from its first value, None)
        thread: PubSubWorkerThread | None = self.pubsub_thread
        if thread is None or self.pubsub is None:
            return
        thread.stop(timeout=0)
        # A lost connection, or the thread closing the pubsub at that moment: nothing to do.
        with contextlib.suppress(RedisError, AttributeError):
            self.pubsub.unsubscribe()  # type: ignore[no-untyped-call]  # unannotated in redis-py
        thread.join(timeout=1)
        self.pubsub.close()

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
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
# A worker whose loop ended on its own waits this long before the next starts: doubling
# while they keep ending soon, back to the first once one ran for a while.
RECONNECT_FIRST, RECONNECT_MOST, RAN_A_WHILE = 0.5, 10.0, 60.0


def work_through_outages(
    queue: Queue, *, stop_seconds: float, burst: bool = False, scheduler: bool = False
) -> bool:
    """Work ``queue`` until asked to stop (or, with ``burst``, until it is empty), riding
    out Redis going away: RQ's work loop quits on any error it meets outside a job's
    handler (Redis restarting in the middle of a job, a timeout, a full disk), so a worker
    that ends without being asked to is followed by a new one, after a pause and once Redis
    answers (never at once: a cause that does not pass must not spin). A job cut short that
    way is the lease's to give back (its packet is redelivered). Whether any job ran."""
    worked = False
    pause = RECONNECT_FIRST
    while True:
        worker = WORKER_CLASS(
            [queue], connection=queue.connection, serializer=JOB_SERIALIZER, job_class=BatonJob
        )
        worker.stop_seconds = stop_seconds
        started = time.monotonic()
        try:
            if burst:
                return worker.work(burst=True, with_scheduler=scheduler) or worked
            worked = worker.work() or worked
        except RedisError as error:  # RQ's own teardown, with Redis gone
            log.warning("worker lost Redis while stopping", error=str(error))
        if worker.stopping:
            return worked
        if time.monotonic() - started > RAN_A_WHILE:
            pause = RECONNECT_FIRST
        log.warning("worker loop ended; starting again", queue=queue.name, pause=pause)
        if not _pause_until_redis_answers(queue, pause):
            return worked
        pause = min(pause * 2, RECONNECT_MOST)


def _pause_until_redis_answers(queue: Queue, pause: float) -> bool:
    """Wait ``pause`` seconds, then until Redis answers (True); False when a signal asks
    the process to stop meanwhile (RQ's handlers belong to the worker that ended)."""
    asked = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        asked.set()

    previous = {number: signal.signal(number, stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        asked.wait(pause)
        while not asked.is_set():
            try:
                queue.connection.ping()
                return True
            except RedisError:
                asked.wait(pause)
                pause = min(pause * 2, RECONNECT_MOST)
        return False
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class AgentNotRegistered(LookupError):
    """``baton agent run NAME`` found no handler for NAME in the modules it imported."""


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
    configure_logging()  # RQ's lines too, on stderr: stdout is the agent's (transcript, MCP)
    connection = sync_redis(queue_url(settings))
    queue = Queue(
        queue_name(settings.namespace, name),
        connection=connection,
        serializer=JOB_SERIALIZER,
        job_class=BatonJob,
    )
    grace = settings.stop_seconds
    if burst:  # RQ then moves due retries once, in this process
        return work_through_outages(queue, stop_seconds=grace, burst=True, scheduler=True)
    with scheduling([queue]):
        return work_through_outages(queue, stop_seconds=grace)


@contextmanager
def scheduling(queues: list[Queue]) -> Iterator[None]:
    """RQ's scheduler for ``queues`` (it enqueues the retries whose interval is over) as a
    thread of the worker process, instead of the process RQ would fork for it: that process
    outlived a worker killed with SIGKILL, heart-beating into Redis for ever. On a normal
    stop it releases its locks; after a kill they expire within a minute."""
    scheduler = RQScheduler(queues, connection=queues[0].connection, serializer=JOB_SERIALIZER)
    stop = threading.Event()
    thread = threading.Thread(
        target=_schedule, args=(scheduler, stop), name="baton-scheduler", daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def _schedule(scheduler: RQScheduler, stop: threading.Event) -> None:
    """RQ's scheduler loop (``RQScheduler.work``) without its signal handlers (the worker
    owns the signals); a round that fails is logged and the next one tried (nothing would
    start the thread again, as RQ restarts its forked scheduler)."""
    born = False
    while not stop.is_set():
        try:
            if not born:
                scheduler.register_birth()
                born = True
            if scheduler.should_reacquire_locks:
                scheduler.acquire_locks()  # type: ignore[no-untyped-call]  # unannotated in rq
            scheduler.heartbeat()  # type: ignore[no-untyped-call]
            scheduler.enqueue_scheduled_jobs()  # type: ignore[no-untyped-call]
        except RedisError as error:  # Redis away or refusing writes: the worker says so too
            log.warning("scheduler round failed; trying again", error=str(error))
        except Exception:
            log.exception("scheduler round failed; trying again")
        stop.wait(scheduler.interval)
    try:
        scheduler.stop()  # type: ignore[no-untyped-call]  # releases its locks, deletes its key
    except RedisError as error:
        log.warning("scheduler could not release its locks; they expire", error=str(error))


def run_maintenance(settings: Settings, *, burst: bool = False) -> bool:
    """Run the periodic sweeps (a thread enqueues the sweep job every
    ``BATON_SWEEP_SECONDS`` and this worker runs it) and deliver webhooks, retried by RQ's
    scheduler. Not RQ's ``CronScheduler``: it enqueues
    with RQ's pickle serializer (RQ 3.0 takes no other), which Baton's workers refuse."""
    configure_logging()  # RQ's lines too, on stderr: stdout is the agent's (transcript, MCP)
    connection = sync_redis(queue_url(settings))
    queue = Queue(
        MAINTENANCE_QUEUE, connection=connection, serializer=JOB_SERIALIZER, job_class=BatonJob
    )
    if burst:
        queue.enqueue(SWEEP)
        return work_through_outages(
            queue, stop_seconds=settings.stop_seconds, burst=True, scheduler=True
        )
    stop = threading.Event()
    ticking = threading.Thread(
        target=_tick,
        args=(queue, settings.handoffs.sweep_seconds, stop),
        name="baton-sweep-timer",
        daemon=True,
    )
    ticking.start()
    try:
        with scheduling([queue]):  # webhook deliveries wait out their retry intervals
            return work_through_outages(queue, stop_seconds=settings.stop_seconds)
    finally:
        stop.set()


def _tick(queue: Queue, seconds: float, stop: threading.Event) -> None:
    """Enqueue the sweep every ``seconds`` (a round that cannot reach Redis is logged and
    the next one tried)."""
    while not stop.is_set():
        try:
            queue.enqueue(SWEEP, result_ttl=RESULT_TTL, failure_ttl=FAILURE_TTL)
        except RedisError as error:
            log.warning("could not enqueue the sweep; trying again", error=str(error))
        stop.wait(seconds)
