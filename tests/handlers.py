"""Agent handlers that the worker processes of the tests import (``--module tests.handlers``).

The packet's note tells the ``tester`` agent what to do: ``raise`` always fails,
``until-fixed`` fails until a record under ``fixed/<packet id>`` exists, ``sleep-S``
takes S seconds, ``hang``
sleeps until killed on the first delivery, anything else (and a later delivery of a
``hang`` packet) records that push mode handled the packet.
"""

from __future__ import annotations

import time

from baton.agents import BatonClient, agent
from baton.server.model.models import Resumed


class HandlerFailure(RuntimeError):
    """The error the failing handler raises; its text must reach the failed packet."""


@agent("tester")
def tester(resumed: Resumed, baton: BatonClient) -> None:
    assert resumed.packet is not None
    note = resumed.packet.note
    if note == "until-fixed" and not baton.list_records(scope=f"fixed/{resumed.packet.id}").records:
        raise HandlerFailure(f"cannot handle {resumed.packet.id} until it is fixed")
    if note == "raise":
        raise HandlerFailure(f"cannot handle {resumed.packet.id}")
    if note and note.startswith("sleep-"):
        time.sleep(float(note.removeprefix("sleep-")))
    if note == "hang" and resumed.packet.deliveries == 1:
        time.sleep(600)
    baton.remember(f"handled/{resumed.packet.id}", "push")
