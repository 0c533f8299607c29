"""RQ job functions. RQ stores their dotted paths (``baton.queue.jobs.…``), so workers must
import them through the ``baton`` package, never as a top-level ``queue`` module."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec
import structlog
from rq import get_current_job

from baton.agents.agent_runtime import handler_for
from baton.queue.sweeps import sweep_all
from baton.queue.worker_context import worker_context
from baton.server.model.clock import utc_now
from baton.server.model.errors import StateConflict, describe
from baton.server.model.models import WebhookDelivery
from baton.server.stores.notices import SIGNATURE_HEADER, signature

WEBHOOK_TIMEOUT = 5.0  # seconds a webhook has to answer (deliveries share a worker)

log = structlog.get_logger("baton.worker")


def deliver_packet(namespace: str, agent: str, packet_id: str) -> dict[str, Any]:
    """Claim one packet for ``agent``, run its handler, and settle the packet.

    The claim goes through the same script as ``resume``: if the packet was already claimed
    (by a pull, or by another job), this job does nothing. When the handler raises, the
    packet stays claimed by this job and RQ retries it; on the last try it is failed. When an
    operator re-runs that failed job with ``rq requeue``, the packet is queued again for it.
    """
    context = worker_context()
    job = get_current_job()
    job_id = job.id if job is not None else ""
    handoffs = context.handoffs(namespace)
    resumed = context.run(handoffs.claim_for_job(agent, packet_id, job_id))
    if resumed.packet is None and context.run(handoffs.requeue_dead_letter(packet_id, job_id)):
        log.info("dead letter requeued by rq", packet=packet_id, job=job_id)
        resumed = context.run(handoffs.claim_for_job(agent, packet_id, job_id))
    if resumed.packet is None:
        log.info("packet skipped", packet=packet_id, agent=agent, reason=resumed.message)
        return {"packet": packet_id, "handled": False, "reason": resumed.message}

    handler = handler_for(agent)
    try:
        if handler is None:
            raise LookupError(f"no handler is registered for agent {agent!r} in this worker")
        with context.holding(namespace, agent, packet_id, job_id):
            handler(resumed, context.client(agent, namespace))
    except Exception as error:
        last_try = job is None or not job.retries_left
        log.warning(
            "handler failed",
            packet=packet_id,
            agent=agent,
            error=describe(error),
            last_try=last_try,
        )
        if last_try:
            context.run(handoffs.fail(packet_id, agent, f"{type(error).__name__}: {error}"))
        raise
    try:
        context.run(handoffs.complete(packet_id, agent, reason="handler returned"))
    except StateConflict as settled:
        # The handler settled the packet itself, e.g. with record_outcome(handoff_id=...).
        log.info("packet settled by its handler", packet=packet_id, state=settled.extra["state"])
    log.info("packet handled", packet=packet_id, agent=agent)
    return {"packet": packet_id, "handled": True}


def deliver_webhook(namespace: str, agent: str, notice_id: str) -> dict[str, Any]:
    """POST one notice to ``agent``'s webhook, signed (``X-Baton-Signature``), and log the
    attempt where the agent and the dashboard see it. A refusal (not 2xx) or no answer
    raises, so RQ tries again after its interval (``BATON_HANDLER_TRIES``,
    ``BATON_RETRY_INTERVALS``); a webhook removed or a notice trimmed meanwhile ends it."""
    context = worker_context()
    notices = context.backend.namespace(namespace).notices
    target = context.run(notices.target(agent))
    notice = context.run(notices.notice(agent, notice_id))
    if target is None or notice is None:
        return {"notice": notice_id, "delivered": False, "reason": "no webhook or notice"}
    url, secret = target
    body = msgspec.json.encode({"namespace": namespace, "agent": agent, "notice": notice})
    job = get_current_job()
    tries = context.settings.handoffs.handler_tries
    left = None if job is None else job.retries_left  # RQ counts the tries left down to 0
    attempt = tries if left is None else tries - left
    status: int | None = None
    error: str | None = None
    try:
        answer = httpx.post(
            url,
            content=body,
            headers={
                "content-type": "application/json",
                SIGNATURE_HEADER: signature(secret, body),
                "X-Baton-Notice": notice_id,
            },
            timeout=WEBHOOK_TIMEOUT,
        )
        status = answer.status_code
        if not answer.is_success:
            error = f"answered {status}"
    except httpx.HTTPError as failure:
        error = f"{type(failure).__name__}: {failure}"
    delivered = error is None
    context.run(
        notices.note_delivery(
            agent,
            WebhookDelivery(
                notice=notice_id,
                attempt=attempt,
                at=utc_now(),
                status=status,
                error=error,
                delivered=delivered,
            ),
        )
    )
    if not delivered:  # named by its host: the rest of a URL may carry a token
        raise WebhookRefused(f"the webhook at {urlsplit(url).hostname}: {error}")
    return {"notice": notice_id, "delivered": True, "status": status}


class WebhookRefused(RuntimeError):
    """A webhook did not take a notice (RQ tries again)."""


def sweep() -> dict[str, Any]:
    """The periodic sweeps of ``baton.queue.sweeps``, run by ``baton worker``'s cron (skipped
    when another process, e.g. ``baton serve``, is sweeping right now)."""
    context = worker_context()
    done = context.run(sweep_all(context.backend, context.settings, context.signing_key))
    return {"skipped": "another process is sweeping"} if done is None else done
