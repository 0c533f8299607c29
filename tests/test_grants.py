"""Grants inside a namespace, on one Redis and a cluster, through the operation table (what
every surface runs): a confined agent reaches only what its grants cover, packets stay
with their sender, receiver and grantees once a namespace has grants, refusals are audited,
and a namespace without grants works as before. The HTTP and MCP surfaces are covered
route by route in ``test_grants_matrix``."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from baton.server.maintenance.backup import export, import_dump
from baton.server.maintenance.namespace_removal import forget_namespace
from baton.server.model.errors import Forbidden, InvalidInput
from baton.server.model.grants import Denied, Grant, parse_grant
from baton.server.model.identity import Caller
from baton.server.model.validation import ANONYMOUS
from baton.server.operation import Call
from baton.server.operations import BY_NAME, OPERATIONS
from baton.server.stores.backend import Backend, Namespace
from tests.conftest import as_agent, run_baton
from tests.test_identity_matrix import EXAMPLES

pytestmark = pytest.mark.anyio

ADMIN = as_agent("ops", admin=True)
BOB = as_agent("bob")
INTERN = as_agent("intern")
MALLORY = as_agent("mallory")


async def do(ns: Namespace, caller: Caller, operation: str, **arguments: Any) -> Any:
    """Run an operation of the table as ``caller``, as REST and MCP do."""
    chosen = BY_NAME[operation]
    return await chosen.perform(Call(caller, ns), chosen.decode(arguments, "baton"))


async def grant(ns: Namespace, agent: str, *texts: str) -> None:
    await do(ns, ADMIN, "set_grants", agent=agent, grants=[_wire(t) for t in texts])


def _wire(text: str) -> dict[str, str]:
    parsed = parse_grant(text)
    return {"kind": parsed.kind, "target": parsed.target, "access": parsed.access}


@pytest.fixture
async def bobs(ns: Namespace) -> dict[str, str]:
    """Bob's records, memories and a packet carol left him: the things grants guard."""
    await do(ns, BOB, "remember", ref="plans/launch", value={"secret": "zebra"})
    await do(ns, BOB, "remember", ref="pub/readme", value="open to all")
    private = await do(ns, BOB, "save_memory", content="zebra deploy keys", project="p")
    shared = await do(ns, BOB, "save_memory", content="quagga style guide", project="q")
    packet = await do(ns, as_agent("carol"), "handoff", to="bob", summary="zebra handover")
    return {"private": private.memory.id, "shared": shared.memory.id, "packet": packet.id}


async def test_a_confined_agent_reaches_only_the_records_its_grants_cover(
    ns: Namespace, bobs: dict[str, str], data_redis: redis.Redis
) -> None:
    """With records:pub/=write the intern reads and writes under pub/ and nothing else:
    reads, history, outcomes and writes elsewhere are 403 with nothing written; listings
    and searches leave the rest out; memories are never reachable as records, even with
    records:*."""
    await grant(ns, "intern", "records:pub/=write")
    assert (await do(ns, INTERN, "recall", ref="pub/readme")).value == "open to all"
    assert (await do(ns, INTERN, "remember", ref="pub/notes", value=1)).version == 1
    for operation, arguments in [
        ("recall", {"ref": "plans/launch"}),
        ("history", {"ref": "plans/launch"}),
        ("outcomes", {"ref": "plans/launch"}),
        ("remember", {"ref": "plans/launch", "value": "overwritten"}),
        ("remember", {"ref": "plans/new", "value": 1}),
        ("record_outcome", {"outcome": "failure", "outcome_ref": "R", "refs": ["plans/launch"]}),
        ("record_outcome", {"outcome": "failure", "outcome_ref": "R"}),
        ("handoff", {"to": "carol", "summary": "s", "pins": [{"ref": "plans/launch"}]}),
    ]:
        with pytest.raises(Denied, match="intern has grants"):
            await do(ns, INTERN, operation, **arguments)
    assert not data_redis.exists(ns.keys.head("plans/new"))
    assert (await do(ns, BOB, "recall", ref="plans/launch")).version == 1

    listed = await do(ns, INTERN, "list_records", limit=100)
    assert sorted(r.ref for r in listed.records) == ["pub/notes", "pub/readme"]
    found = await do(ns, INTERN, "recall", query="zebra")
    assert found.records == []

    await grant(ns, "intern", "records:*")
    memory_ref = f"memory/{bobs['private']}"
    with pytest.raises(Denied):
        await do(ns, INTERN, "recall", ref=memory_ref)
    everything = await do(ns, INTERN, "list_records", limit=100)
    assert memory_ref not in {r.ref for r in everything.records}
    assert "plans/launch" in {r.ref for r in everything.records}
    with pytest.raises(Denied):  # read, not write
        await do(ns, INTERN, "remember", ref="pub/readme", value="x")


async def test_memory_grants_follow_the_memorys_project(
    ns: Namespace, bobs: dict[str, str]
) -> None:
    """memories:q=write: searches must name project q; memories of p cannot be read,
    expanded, updated, forgotten or written into, and p's memories stay as they were; the
    intern saves and updates its own in q."""
    await grant(ns, "intern", "memories:q=write")
    found = await do(ns, INTERN, "recall_memories", query="quagga zebra", project="q")
    assert [hit.id for hit in found.results] == [bobs["shared"]]
    for operation, arguments in [
        ("recall_memories", {"query": "zebra"}),
        ("recall_memories", {"query": "zebra", "project": "p"}),
        ("smart_search", {"expand_ids": [bobs["private"]]}),
        ("memory_update", {"memory_id": bobs["private"], "content": "mine now"}),
        ("memory_forget", {"memory_id": bobs["private"]}),
        ("save_memory", {"content": "planted", "project": "p"}),
        ("memory_consolidate", {"apply": True}),
        ("context", {"session_id": "s1", "kind": "start", "cwd": "/r"}),
    ]:
        with pytest.raises(Denied):
            await do(ns, INTERN, operation, **arguments)
    assert (await ns.memories.get(bobs["private"])).content == "zebra deploy keys"
    own = await do(ns, INTERN, "save_memory", content="intern notes", project="q")
    updated = await do(ns, INTERN, "memory_update", memory_id=own.memory.id, content="v2")
    assert updated.memory.content == "v2"


async def test_packets_stay_with_sender_receiver_and_grantees(
    ns: Namespace, bobs: dict[str, str]
) -> None:
    """Once the namespace has grants, an agent without any (mallory) no longer reads bob's
    packets; a packets:bob grant lets the intern read them; bob, carol and operators still
    do. Without grants in the namespace, everyone read them (as before)."""
    packet = bobs["packet"]
    assert (await do(ns, MALLORY, "get_handoff", packet_id=packet)).id == packet  # open
    await grant(ns, "intern", "packets:bob")
    with pytest.raises(Denied):
        await do(ns, MALLORY, "get_handoff", packet_id=packet)
    assert (await do(ns, MALLORY, "list_handoffs")).packets == []
    for reader in (BOB, as_agent("carol"), INTERN, ADMIN):
        assert (await do(ns, reader, "get_handoff", packet_id=packet)).id == packet
        listed = await do(ns, reader, "list_handoffs")
        assert [each.id for each in listed.packets] == [packet]
    # records and memories stay open to agents without grants
    assert (await do(ns, MALLORY, "recall", ref="plans/launch")).version == 1


async def test_refusals_are_audited_once_a_minute_per_agent_and_target(
    ns: Namespace, bobs: dict[str, str]
) -> None:
    """Each refusal by grants is an audit entry naming the agent and what it asked for; the
    same refusal again within a minute adds none (a retry loop cannot flood the log)."""
    await grant(ns, "intern", "records:pub/")
    for _ in range(3):
        with pytest.raises(Denied):
            await do(ns, INTERN, "recall", ref="plans/launch")
    with pytest.raises(Denied):
        await do(ns, INTERN, "audit")
    denied = [e for e in await do(ns, ADMIN, "audit") if e.action == "denied"]
    assert [(e.agent, e.target) for e in denied] == [
        ("intern", "the operation audit (closed to agents with grants)"),
        ("intern", "read records:plans/launch"),
    ]


async def test_every_operation_without_a_guard_is_closed_to_confined_agents(
    ns: Namespace, bobs: dict[str, str]
) -> None:
    """Generated from the table: an operation that declares nothing it reaches is refused to
    a confined agent before it runs, and runs for an agent of the same namespace without
    grants (so a new operation is closed until someone declares what it reaches)."""
    await grant(ns, "intern", "records:*=write", "memories:*=write", "packets:*")
    unguarded = [op for op in OPERATIONS if op.guard is None]
    assert {op.name for op in unguarded} >= {"audit", "memory_stats", "set_grants"}
    examples = {
        "requeue": {"packet_id": bobs["packet"]},
        "set_grants": {"agent": "x", "grants": []},
    }
    for operation in unguarded:
        route = operation.rest
        example = EXAMPLES.get((route.method, route.path), {}) if route else {}
        given = operation.decode(examples.get(operation.name, example), "baton")
        with pytest.raises(Denied, match=f"the operation {operation.name}"):
            await operation.perform(Call(INTERN, ns), given)
    assert (await do(ns, MALLORY, "memory_stats")).refs >= 2


async def test_grants_are_set_by_operators_and_shown_to_their_agent(ns: Namespace) -> None:
    """Only operators set grants; an agent lists its own only; an empty list lifts the
    confinement; a malformed grant is a 422 naming the field."""
    with pytest.raises(Forbidden, match="setting grants needs an admin token"):
        await do(ns, MALLORY, "set_grants", agent="mallory", grants=[])
    await grant(ns, "intern", "records:pub/=write", "memories:q")
    await grant(ns, "other", "packets:*")
    assert [g.agent for g in await do(ns, ADMIN, "grants")] == ["intern", "other"]
    mine = await do(ns, INTERN, "grants")
    assert [[g.text() for g in each.grants] for each in mine] == [
        ["records:pub/=write", "memories:q=read"]
    ]
    await do(ns, ADMIN, "set_grants", agent="intern", grants=[])
    assert [g.agent for g in await do(ns, ADMIN, "grants")] == ["other"]
    with pytest.raises(InvalidInput, match="target"):
        await do(ns, ADMIN, "set_grants", agent="x", grants=[{"kind": "packets", "target": "a b"}])
    with pytest.raises(InvalidInput, match="grants"):
        await do(ns, ADMIN, "set_grants", agent="x", grants=[{"kind": "files", "target": "a"}])
    assert parse_grant("records:a:b=write") == Grant(kind="records", target="a:b", access="write")
    with pytest.raises(InvalidInput, match="give records:PREFIX"):
        parse_grant("records")


async def test_grants_outlive_an_import_replace_and_go_with_the_namespace(
    backend: Backend, bobs: dict[str, str]
) -> None:
    """A namespace replaced from a dump keeps its grants and webhooks (settings, not data:
    an import never lifts a confinement, nor stops calling an agent); forgetting the
    namespace removes them."""
    ns = backend.namespace("default")
    await grant(ns, "intern", "records:pub/")
    await ns.notices.set_webhook("intern", "https://example.com/hook")
    lines = [line async for line in export(ns)]
    await import_dump(ns, lines, replace=True)
    assert [g.agent for g in await ns.grants.every()] == ["intern"]
    assert (await ns.notices.webhook("intern")).url == "https://example.com/hook"
    with pytest.raises(Denied):
        await do(ns, INTERN, "recall", ref="plans/launch")
    await forget_namespace(ns)
    assert await ns.grants.every() == []
    assert (await ns.notices.webhook("intern")).url is None


def test_baton_token_grant_ungrant_and_grants(redis_url: str) -> None:
    """The CLI adds grants to an agent, lists them per namespace, takes some or all away;
    a malformed grant is one line on stderr and exit code 2 (as every refused input)."""
    env = {"BATON_REDIS_URL": redis_url}
    added = run_baton("token", "grant", "intern", "records:pub/", "--namespace", "team", env=env)
    assert added.returncode == 0, added.stderr
    more = run_baton(
        "token", "grant", "intern", "memories:web=write", "--namespace", "team", env=env
    )
    assert more.stdout.split() == ["team", "intern", "records:pub/=read,", "memories:web=write"]
    listed = run_baton("token", "grants", "--namespace", "team", env=env)
    assert listed.stdout == more.stdout
    fewer = run_baton("token", "ungrant", "intern", "records:pub/", "--namespace", "team", env=env)
    assert fewer.stdout.split() == ["team", "intern", "memories:web=write"]
    cleared = run_baton("token", "ungrant", "intern", "--namespace", "team", env=env)
    assert "not confined" in cleared.stdout
    assert run_baton("token", "grants", "--namespace", "team", env=env).stdout == ""
    bad = run_baton("token", "grant", "intern", "files:x", "--namespace", "team", env=env)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "give records:PREFIX" in bad.stderr


async def observed(ns: Namespace, caller: Caller, session: str, project: str, tool: str) -> str:
    """An observation of ``tool`` on ``/r/a.py`` in ``session`` of ``project``: its id."""
    answer = await do(
        ns,
        caller,
        "observe",
        hook_type="post_tool_use",
        session_id=session,
        project=project,
        cwd="/r",
        timestamp="2026-01-01T00:00:00Z",
        data={
            "tool_name": "Edit",
            "tool_input": {"file_path": "/r/a.py"},
            "note": f"{project} zebra",
        },
    )
    return answer.observation.id


async def test_what_a_confined_agent_reads_in_its_project_leaves_other_projects_out(
    ns: Namespace, bobs: dict[str, str]
) -> None:
    """memories:q: enrich and file history in q show q's observations, not p's; an
    observation of p named to expand, or given as a memory's source, is refused; "where were
    we" (found by folder, any project's) needs memories:*; a memory of no project is every
    project's to read but only memories:*=write changes it, and a confined save never
    supersedes it."""
    bobs_session = as_agent("bob", session="s-bob")
    theirs = await observed(ns, bobs_session, "s-bob", "p", "Read")
    await do(ns, as_agent("intern", session="s-i"), "start_session", id="s-i", project="q")
    mine = await observed(ns, as_agent("intern", session="s-i"), "s-i", "q", "Edit")
    await grant(ns, "intern", "memories:q=write")
    intern = as_agent("intern", session="s-i")
    enriched = await do(ns, intern, "enrich", session_id="s-x", files=["/r/a.py"], project="q")
    assert enriched.context.count("\n- ") == 1  # the intern's own, not bob's of p
    await do(
        ns,
        BOB,
        "save_memory",
        content="a.py notes",
        project="q",
        files=["/r/a.py"],
        source_observation_ids=[theirs],
    )  # bob may: he reads p
    history = await do(ns, intern, "memory_file_history", files="/r/a.py", project="q")
    assert history.context.count("\n- ") == 1
    for operation, arguments in [
        ("smart_search", {"expand_ids": [theirs]}),
        ("save_memory", {"content": "x", "project": "q", "source_observation_ids": [theirs]}),
        ("context", {"session_id": "s-i", "kind": "compact"}),
        ("context", {"session_id": "s-i", "kind": "start", "cwd": "/r"}),
    ]:
        with pytest.raises(Denied):
            await do(ns, intern, operation, **arguments)
    assert (await do(ns, intern, "smart_search", expand_ids=[mine])).count == 1

    unscoped = await do(  # shared: saved with no agent and no project
        ns, as_agent(ANONYMOUS), "save_memory", content="team wide rotation policy for keys"
    )
    unscoped_id = unscoped.memory.id
    found = await do(ns, intern, "recall_memories", query="rotation policy", project="q")
    assert unscoped_id in [hit.id for hit in found.results]
    with pytest.raises(Denied, match="write memories of no project"):
        await do(ns, intern, "memory_forget", memory_id=unscoped_id)
    near_copy = await do(
        ns, intern, "save_memory", content="team wide rotation policy for keys", project="q"
    )
    assert near_copy.similar_to is not None and near_copy.similar_to.id == unscoped_id
    assert (await ns.memories.get(unscoped_id)).is_latest


async def test_a_packet_hands_over_its_pinned_values_and_nothing_newer(
    ns: Namespace, bobs: dict[str, str]
) -> None:
    """A confined receiver resumes a packet pinning a record it may not read: it gets the
    pinned value the sender handed over, not the record's current value, patch or authors;
    handing the packet's pins on without naming them is refused (they are read today)."""
    await do(ns, BOB, "handoff", to="intern", summary="launch", pins=[{"ref": "plans/launch"}])
    await do(ns, BOB, "remember", ref="plans/launch", value={"secret": "okapi"})
    await grant(ns, "intern", "records:pub/=write")
    intern = as_agent("intern", session="s-i")
    resumed = await do(ns, intern, "resume")
    (stale,) = resumed.stale
    assert stale.pinned_value == {"secret": "zebra"}
    assert (stale.current_value, stale.patch, stale.current_confidence) == (None, None, None)
    assert stale.versions == [] and stale.outcomes == []
    with pytest.raises(Denied, match="read records:plans/launch"):
        await do(ns, intern, "handoff", to="intern", summary="again")
    assert (await do(ns, BOB, "resume")).packet is not None  # carol's: bob's own view is whole


async def test_agents_without_grants_answer_as_before_in_a_namespace_with_grants(
    ns: Namespace, bobs: dict[str, str]
) -> None:
    """Only confined agents have their inputs checked: mallory, without grants, forgets her
    memory naming a session nobody started (ignored, as before), not a 404 from a check
    meant for others; her compact context of an unknown session is still empty, not a 403."""
    await grant(ns, "intern", "records:pub/")
    saved = await do(ns, MALLORY, "save_memory", content="mallory's own note", project="p")
    forgotten = await do(
        ns, MALLORY, "memory_forget", memory_id=saved.memory.id, session_id="s-unknown"
    )
    assert forgotten.memories == [saved.memory.id]
    compact = await do(ns, MALLORY, "context", session_id="s-unknown", kind="compact")
    assert compact.blocks == 0


async def test_a_session_shows_a_confined_agent_only_the_records_it_may_read(
    ns: Namespace, bobs: dict[str, str]
) -> None:
    """A session bob worked in touched plans/launch and pub/readme; the intern, who may read
    every project's memories but only records under pub/, sees pub/readme among what it
    touched (in the session, the list and "where were we"), never the name of the record it
    may not read."""
    in_session = as_agent("bob", session="s-bob")
    await do(ns, in_session, "start_session", id="s-bob", project="p", cwd="/work/shop")
    await do(ns, in_session, "recall", ref="plans/launch")
    await do(ns, in_session, "recall", ref="pub/readme")
    await grant(ns, "intern", "records:pub/", "memories:*")
    assert set((await do(ns, INTERN, "get_session", session_id="s-bob")).touched) == {"pub/readme"}
    [listed] = [s for s in await do(ns, INTERN, "list_sessions") if s.id == "s-bob"]
    assert set(listed.touched) == {"pub/readme"}
    found = await do(ns, INTERN, "memory_resume_here", cwd="/work/shop")
    assert found.session.id == "s-bob" and set(found.session.touched) == {"pub/readme"}
    assert set((await do(ns, BOB, "get_session", session_id="s-bob")).touched) == {
        "plans/launch",
        "pub/readme",
    }
