"""Contested facts: two writers who built on the same version without seeing each other
leave a record Baton marks contested, until a write that saw both (or an outcome) settles
it. Against the real embedded server and a cluster."""

from __future__ import annotations

import pytest

from baton.server.model.errors import InvalidInput
from baton.server.model.memory_models import SessionStartInput
from baton.server.model.models import Contest, Remembered
from baton.server.stores.records import RecordStore
from tests.conftest import as_agent, handoff_input

pytestmark = pytest.mark.anyio

REF = "listing/553/assessment"


async def session_of(store: RecordStore, agent: str) -> str:
    return (await store.ns.sessions.start(SessionStartInput(), caller=as_agent(agent))).id


async def both_read_then_both_write(store: RecordStore) -> Remembered:
    """The scout writes v1; two sessions read it; the pricer writes v2, then the
    reviewer (who never saw v2) writes v3: its answer."""
    await store.remember(REF, {"verdict": "apply"}, agent="scout")
    pricer, reviewer = await session_of(store, "pricer"), await session_of(store, "reviewer")
    await store.recall(REF, agent="pricer", session=pricer)
    await store.recall(REF, agent="reviewer", session=reviewer)
    await store.remember(REF, {"verdict": "apply", "price": 410}, agent="pricer", session=pricer)
    return await store.remember(REF, {"verdict": "skip"}, agent="reviewer", session=reviewer)


async def test_two_writes_from_the_same_read_contest_the_record(store: RecordStore) -> None:
    """Both sessions read v1 and both wrote: v3 is kept as the current version, as always,
    and the record (every version of it, and its history) names v2 and v3 as contested,
    both built on v1; the reviewer's write says so."""
    written = await both_read_then_both_write(store)
    assert written.contested == Contest(base=1, versions=[2, 3])

    current = await store.recall(REF)
    assert (current.version, current.value) == (3, {"verdict": "skip"})
    assert current.contested == Contest(base=1, versions=[2, 3])
    assert (await store.recall(REF, version=1)).contested == Contest(base=1, versions=[2, 3])
    assert (await store.history(REF)).contested == Contest(base=1, versions=[2, 3])


async def test_writes_that_saw_the_head_contest_nothing(store: RecordStore) -> None:
    """A session that read the version it writes on, a write with ``expected_version``, and
    a write naming no version at all (it lands on the head) leave the record uncontested."""
    await store.remember(REF, 1, agent="scout")
    session = await session_of(store, "pricer")
    await store.recall(REF, agent="pricer", session=session)
    await store.remember(REF, 2, agent="pricer", session=session)
    await store.remember(REF, 3, agent="pricer", session=session)  # it saw its own v2
    await store.remember(REF, 4, agent="reviewer", expected_version=3)
    await store.remember(REF, 5, agent="reviewer")

    assert (await store.recall(REF)).contested is None


async def test_a_session_that_wrote_then_missed_a_write_contests(store: RecordStore) -> None:
    """A session's own write is what it last saw: writing again after someone else's write,
    without reading it, contests the record."""
    session = await session_of(store, "scout")
    await store.remember(REF, 1, agent="scout", session=session)
    await store.remember(REF, 2, agent="pricer")
    await store.remember(REF, 3, agent="scout", session=session)

    assert (await store.recall(REF)).contested == Contest(base=1, versions=[2, 3])


async def test_a_write_naming_every_contested_version_settles_it(store: RecordStore) -> None:
    """A write that saw only the newest contested version keeps the contest (it takes that
    version's place); a third stale write joins it; the write naming all of them settles
    it."""
    await both_read_then_both_write(store)

    await store.remember(REF, {"verdict": "skip", "why": "noise"}, agent="e", based_on=[3])
    assert (await store.recall(REF)).contested == Contest(base=1, versions=[2, 4])
    await store.remember(REF, {"verdict": "late"}, agent="late", based_on=[1])
    assert (await store.recall(REF)).contested == Contest(base=1, versions=[2, 4, 5])

    settled = await store.remember(REF, {"verdict": "apply"}, agent="lead", based_on=[2, 4, 5])
    current = await store.recall(REF)
    assert (current.version, current.contested, settled.contested) == (settled.version, None, None)


async def test_based_on_a_version_not_written_yet_is_refused(store: RecordStore) -> None:
    """``based_on`` naming a version past the head is a caller's mistake: refused, naming
    the field and the current version, and nothing is written."""
    await store.remember(REF, 1, agent="scout")
    with pytest.raises(InvalidInput, match=r"based_on.*names version 7.*at version 1"):
        await store.remember(REF, 2, agent="scout", based_on=[1, 7])
    assert (await store.recall(REF)).version == 1


async def test_an_outcome_settles_a_contest(store: RecordStore) -> None:
    """An outcome recorded on a contested record settles it, and its report says so."""
    await both_read_then_both_write(store)
    await store.remember("listing/482/assessment", 1, agent="scout")

    report = await store.ns.outcomes.record(
        "success", "RUN-9", agent="lead", refs=[REF, "listing/482/assessment"]
    )

    assert report.settled == [REF]
    assert (await store.recall(REF)).contested is None


async def test_resume_and_search_show_the_contest(store: RecordStore) -> None:
    """A packet pinning a contested record shows the contest on the pin at resume, and a
    search finds the record with its mark."""
    await store.remember(REF, {"verdict": "apply"}, agent="scout")
    await store.ns.handoffs.handoff(
        handoff_input(to="executor", summary="apply?", pins=[{"ref": REF}]), from_agent="scout"
    )
    await store.remember(REF, {"verdict": "maybe"}, agent="pricer", based_on=[1])
    await store.remember(REF, {"verdict": "skip"}, agent="reviewer", based_on=[1])

    resumed = await store.ns.handoffs.resume("executor")
    assert resumed.packet is not None
    [pin] = resumed.pins
    assert (pin.version, pin.stale, pin.contested) == (1, True, Contest(base=1, versions=[2, 3]))
    page = await store.list_records(query="skip")
    assert [(r.ref, r.contested) for r in page.records] == [(REF, Contest(base=1, versions=[2, 3]))]


async def test_an_older_write_joining_a_contest_lowers_its_base(store: RecordStore) -> None:
    """The base is the newest version every contested write saw: a write that saw only v1
    joining a contest of writes that saw v2 makes it v1."""
    for value in (1, 2, 3):
        await store.remember(REF, value, agent="scout")
    await store.remember(REF, 4, agent="a", based_on=[2])
    assert (await store.recall(REF)).contested == Contest(base=2, versions=[3, 4])
    await store.remember(REF, 5, agent="b", based_on=[1])
    assert (await store.recall(REF)).contested == Contest(base=1, versions=[3, 4, 5])
