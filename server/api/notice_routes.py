"""An agent's notices as a Server-Sent Events stream (``GET
/v1/agents/{agent}/notices/stream``): the notices after ``Last-Event-ID`` (or ``after``),
then each new one as it is made. The stream holds no Redis connection of its own: it is woken
by the ``notice`` events of the namespace's activity stream (:class:`EventHub`) and reads the
agent's notices with the request pool."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Controller, Request, get
from litestar.datastructures import State
from litestar.params import FromPath, FromQuery
from litestar.response import ServerSentEvent, ServerSentEventMessage

from baton.server.api.deps import CallerDep
from baton.server.api.event_streams import EventHub
from baton.server.api.problems import problems
from baton.server.model.errors import BatonError, Forbidden, InvalidInput
from baton.server.model.grants import record

RECHECK_SECONDS = 5.0  # the caller's token is checked again, and the notices read, this often
KEEP_ALIVE_SECONDS = 15.0
PAGE = 100  # notices read at a time


class NoticeStream(Controller):
    path = "/v1/agents"
    tags = ["handoffs"]  # noqa: RUF012 (Litestar reads the class attribute)

    @get(
        "/{agent:str}/notices/stream",
        summary="An agent's notices, as they are made (text/event-stream)",
        description="Each event is a notice (`event: pin_moved`, `id`: the notice id, `data`: "
        "the notice as JSON). Reconnect with `Last-Event-ID` (or `?after=`) to miss none.",
        responses=problems(403, 429),
    )
    async def stream(
        self,
        agent: FromPath[str],
        caller: CallerDep,
        state: State,
        request: Request[Any, Any, Any],
        after: FromQuery[str | None] = None,
    ) -> ServerSentEvent:
        if agent != caller.agent:
            raise Forbidden(
                f"{caller.agent} cannot follow {agent}'s notices; send X-Baton-Agent: {agent}",
                agent=agent,
            )
        ns = state.backend.namespace(caller.namespace)
        resumed = request.headers.get("last-event-id")
        last = resumed or after or await ns.notices.newest(agent)
        try:
            await ns.notices.since(agent, last, 1)  # a malformed id is a 422 now, not mid-stream
        except InvalidInput as error:
            field = "last-event-id" if resumed else "after"
            raise InvalidInput(field, error.detail.split(": ", 1)[1]) from None
        hub: EventHub = state.events
        subscription = hub.subscribe(caller.namespace, caller.credential.token_id or agent)
        queue = await subscription.__aenter__()  # before the response: 429 beyond the cap
        scope, gate, redis = request.scope, state.gate, state.backend.redis

        async def allowed() -> bool:
            try:
                await gate.identify(scope, redis)
            except BatonError:
                return False
            return True

        async def stream() -> AsyncIterator[ServerSentEventMessage]:
            nonlocal last
            loop = asyncio.get_running_loop()
            checked = waited = loop.time()
            try:
                yield ServerSentEventMessage(comment="connected", data=None)
                woken = True
                while True:
                    while woken:  # every notice since the last one sent, a page at a time
                        page = await ns.notices.since(agent, last, PAGE)
                        rights = await ns.grants.rights(caller)
                        for notice in page.notices:
                            if rights is None or rights.may(record(notice.ref)):
                                yield ServerSentEventMessage(
                                    data=msgspec.json.encode(notice).decode(),
                                    event=notice.kind,
                                    id=notice.id,
                                )
                                waited = loop.time()
                        last, woken = page.last, len(page.notices) == PAGE
                    try:
                        event = await asyncio.wait_for(queue.get(), RECHECK_SECONDS)
                        woken = event.kind == "notice" and event.agent == agent
                    except TimeoutError:
                        woken = False
                    if loop.time() - checked >= RECHECK_SECONDS:
                        if not await allowed():
                            return
                        checked, woken = loop.time(), True
                    if loop.time() - waited >= KEEP_ALIVE_SECONDS:
                        yield ServerSentEventMessage(comment="keep-alive", data=None)
                        waited = loop.time()
            finally:
                await subscription.__aexit__(None, None, None)

        return ServerSentEvent(stream())
