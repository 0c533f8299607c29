"""What Baton's workers agree to run: Baton's own job functions, from JSON job data.

RQ, as shipped, unpickles a job's data and imports and calls whatever function the job
names, so anyone who can write to the queue's Redis runs code in every worker. Baton's
queues use RQ's ``JSONSerializer`` (decoding JSON runs no code) and its workers check each
job before RQ imports or calls anything: only Baton's job functions, with arguments of
their shapes, and no callbacks or webhooks. A job that fails the check is failed with the
reason, in RQ's failed registry, and nothing of it runs.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rq.job import Job
from rq.serializers import JSONSerializer

from baton.server.model.keys import JOB_ID_PREFIX
from baton.server.model.validation import NAMESPACE_PATTERN, PACKET_ID_PATTERN

DELIVER = "baton.queue.jobs.deliver_packet"
SWEEP = "baton.queue.jobs.sweep"
WEBHOOK = "baton.queue.jobs.deliver_webhook"
JOB_SERIALIZER = JSONSerializer  # decoding a job's data runs no code, unlike pickle
# Each job function Baton enqueues, with the number of (text) arguments it takes.
ALLOWED_JOBS: dict[str, int] = {DELIVER: 3, SWEEP: 0, WEBHOOK: 3}
CALLBACK_FIELDS = ("success_callback_name", "failure_callback_name", "stopped_callback_name")
# keys.job_id's shape: baton-<namespace>-<packet id>-<delivery attempt>
DELIVERY_JOB_ID = re.compile(
    f"{JOB_ID_PREFIX}(?:{NAMESPACE_PATTERN.pattern})-{PACKET_ID_PATTERN.pattern}-[0-9]+"
)
PICKLE_PROTOCOL = b"\x80"  # how pickled data (protocol 2 and later) starts


class BatonJob(Job):
    """RQ's job, that never imports or calls what Baton did not write: its function is one
    of Baton's job functions or nothing runs, and its callbacks and webhooks are none, on
    every path RQ takes (a worker running it, and RQ's registry cleanup, which calls an
    expired job's failure callback and webhooks without the worker's check)."""

    @property
    def func(self) -> Any:
        if self.func_name not in ALLOWED_JOBS or self.instance is not None:
            raise JobRefused(f"refused by Baton: it names {self.func_name!r}")
        return super().func

    @property
    def success_callback(self) -> None:
        return None

    @property
    def failure_callback(self) -> None:
        return None

    @property
    def stopped_callback(self) -> None:
        return None

    def send_webhooks(self, status: Any, *, exc_string: str | None = None) -> None:
        return None


class JobRefused(RuntimeError):
    """A job that names something other than Baton's job functions."""


def _call(job: Job) -> Any:
    """The job's (function, instance, args, kwargs) as JOB_SERIALIZER reads them; None when
    its data is not a JSON job."""
    try:
        function, instance, args, kwargs = json.loads(job.data)
    except (ValueError, TypeError):
        return None
    return function, instance, args, kwargs


def queued_before_json(job: Job) -> bool:
    """A delivery job as Baton enqueued it before its queues took JSON: pickled data (never
    loaded here) under a delivery job's id. It is dropped unrun; the sweep then finds its
    packet without a job and enqueues it again, as JSON."""
    return bool(DELIVERY_JOB_ID.fullmatch(job.id)) and job.data.startswith(PICKLE_PROTOCOL)


def refusal(job: Job) -> str | None:
    """Why ``job`` must not run, or None when it is one of Baton's own jobs."""
    call = _call(job)
    if call is None:
        return "its data is not a JSON job (Baton's queues take no pickled jobs)"
    function, instance, args, kwargs = call
    if not isinstance(function, str) or function not in ALLOWED_JOBS:
        return f"it names {function!r}, not one of Baton's job functions"
    arity = ALLOWED_JOBS[function]
    shaped = isinstance(args, list) and len(args) == arity
    if instance is not None or kwargs or not shaped or not all(isinstance(a, str) for a in args):
        return f"its arguments are not those of {function}"
    hooks = job.to_dict(include_meta=False)
    if any(hooks.get(name) for name in CALLBACK_FIELDS) or hooks.get("webhooks"):
        return "it carries callbacks or webhooks, which Baton's jobs never have"
    return None
