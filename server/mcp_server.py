"""Baton as an MCP server: the seven tools of shared memory and handoffs.

(No ``from __future__ import annotations`` here: the MCP SDK builds each tool's pydantic
argument model from the real annotation objects.)

The tools call the same store functions as the REST API. Over stdio (``baton mcp``) the
process is one agent (``--agent`` or ``AGENT_ID``) and one Baton session; over streamable
HTTP (mounted at ``/mcp`` in the API) the caller is the one the HTTP gate resolved for the
request (token, headers; each MCP session is its own Baton session). Any mistake a caller
can make comes back as a tool result with ``isError: true`` and a message saying what to fix.
"""

import functools
import inspect
import os
import secrets
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, Literal, ParamSpec, get_args

import msgspec
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from baton.server import agentmemory_shapes as shapes
from baton.server.backend import Backend, Namespace, open_backend
from baton.server.failures import failure_of, tool_error_text
from baton.server.identity import CALLER, Caller, local
from baton.server.memories import MAX_RECALL, Forgotten, split_list
from baton.server.models import (
    History,
    OutcomeReport,
    Packet,
    RecordPage,
    RecordVersion,
    Remembered,
    Resumed,
    ResumeHere,
    Stats,
)
from baton.server.settings import Settings

INSTRUCTIONS = """\
Baton is a memory shared by several agents. Facts are records addressed by a ref
`scope/key` (e.g. `listing/553/assessment`); writing one never overwrites, it adds a version.
Use `remember` for what you learn, `recall` before acting on a fact, `handoff` to pass work
to another agent, `resume` to pick up work handed to you (it tells you which facts changed
since the sender pinned them), and `record_outcome` to report whether acting on facts worked.
"""

P = ParamSpec("P")
SHOWN_DECIMALS = 4
# The fields holding figures Baton computes, rounded for a model; and those holding what an
# agent stored, never touched.
SHOWN_ROUNDED = frozenset(
    {"confidence", "before", "after", "average_confidence", "score", "similarity"}
)
STORED_DATA = frozenset({"value", "data", "details"})


def _not_a_boolean(value: Any) -> Any:
    """Refuse true and false where a number is expected (pydantic would read them as 1 and
    0; REST refuses them); numbers written as text are read as numbers, as before."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not true or false")
    return value


NOT_BOOLEAN = BeforeValidator(_not_a_boolean)
Ref = Annotated[str, Field(description="A record ref 'scope/key'; the scope may hold slashes.")]
Agent = Annotated[str, Field(description="An agent id, e.g. 'executor'.")]


@dataclass
class Binding:
    """How tool calls find the store and the caller: ``caller`` is fixed for a stdio
    server (one process, one agent, one session); left None it is the one the HTTP gate
    resolved for each request."""

    caller: Caller | None = None
    backend: Backend | None = None


@dataclass(frozen=True)
class ToolCall:
    """A tool call's caller and the stores of its namespace."""

    caller: Caller
    ns: Namespace

    @property
    def agent(self) -> str:
        return self.caller.agent

    @property
    def session(self) -> str | None:
        return self.caller.session


# Set by the agentmemory-compatible /mcp/call shim, which calls tools outside an MCP request.
SHIM_CALLER: ContextVar[Caller | None] = ContextVar("baton_mcp_shim_caller", default=None)


def _resolve(binding: Binding, ctx: Context) -> ToolCall:
    if binding.backend is None:
        raise ToolError("Baton is still starting; try again in a moment")
    caller = SHIM_CALLER.get() or binding.caller
    if caller is None:
        request = ctx.request_context.request
        caller = None if request is None else request.scope.get("state", {}).get(CALLER)
    if caller is None:
        raise ToolError("no caller: this transport carries no identity")
    return ToolCall(caller=caller, ns=binding.backend.namespace(caller.namespace))


def rounded(value: Any, key: str | None = None) -> Any:
    """Baton's own figures (confidences, scores) shown to a model at 4 decimal places
    (0.8400000000000001 -> 0.84); what agents stored (a record's value) is shown exactly as
    stored, and REST answers stay exact, so hashes still verify from them."""
    if isinstance(value, float):
        return round(value, SHOWN_DECIMALS) if key in SHOWN_ROUNDED else value
    if isinstance(value, dict):
        return {
            name: item if name in STORED_DATA else rounded(item, name)
            for name, item in value.items()
        }
    if isinstance(value, list):
        return [rounded(item, key) for item in value]
    return value


def output_model(result: Any) -> type[BaseModel]:
    """A tool's output model: it publishes msgspec's JSON schema of ``result`` (a Struct,
    or a union of Structs) as the tool's ``outputSchema``, the REST answer's shape, and lets
    the tool's JSON object through as it is. MCP clients check results against it."""
    members: tuple[type[msgspec.Struct], ...] = get_args(result) or (result,)
    _, definitions = msgspec.json.schema_components(members, ref_template="{name}")
    shapes = [_inlined(definitions[member.__name__], definitions) for member in members]
    schema = {**(shapes[0] if len(shapes) == 1 else {"anyOf": shapes}), "type": "object"}

    class Output(BaseModel):
        model_config = ConfigDict(extra="allow")

        @classmethod
        def __get_pydantic_json_schema__(cls, *_: Any) -> dict[str, Any]:
            return schema

    Output.__name__ = Output.__qualname__ = "_".join(member.__name__ for member in members)
    return Output


def _inlined(schema: Any, definitions: dict[str, Any]) -> Any:
    """``schema`` with every ``$ref`` replaced by its definition: self-contained, as pydantic
    resolves a published schema's references against its own definitions (the result types
    are not recursive)."""
    if isinstance(schema, list):
        return [_inlined(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _inlined(definitions[schema["$ref"]], definitions)
    return {key: _inlined(value, definitions) for key, value in schema.items()}


def _as_tool_error(
    function: Callable[P, Awaitable[Any]],
) -> Callable[P, Awaitable[dict[str, Any]]]:
    """Turn Baton's errors into isError results and results into plain JSON objects,
    published with the schema of the function's declared result (:func:`output_model`)."""

    @functools.wraps(function)
    async def call(*args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        try:
            result = await function(*args, **kwargs)
        except Exception as error:
            failure = failure_of(error)
            if failure.kind == "unexpected":
                raise
            raise ToolError(tool_error_text(failure)) from None
        built: dict[str, Any] = rounded(msgspec.to_builtins(result))
        return built

    # Tools advertise structured output: a JSON object shaped like the REST response.
    signature = inspect.signature(function)
    output = output_model(signature.return_annotation)
    call.__signature__ = signature.replace(return_annotation=output)  # type: ignore[attr-defined]
    call.__annotations__ = {**function.__annotations__, "return": output}
    return call


def create_mcp_server(binding: Binding) -> MCPServer:
    """The MCP server with Baton's tools, bound to ``binding``."""
    mcp = MCPServer("baton", instructions=INSTRUCTIONS)

    @mcp.tool(
        description=(
            "Store a fact under a ref. Writing an existing ref adds a new version (old versions "
            "stay readable). Give your confidence (0-1) in the fact. Set expected_version to "
            "write only if nobody changed the record since you read that version."
        )
    )
    @_as_tool_error
    async def remember(
        ref: Ref,
        value: Annotated[Any, Field(description="The fact: any JSON value.")],
        ctx: Context,
        tags: Annotated[list[str], Field(description="Labels for finding it again.")] = [],  # noqa: B006
        confidence: Annotated[
            float, Field(ge=0, le=1, description="How sure you are."), NOT_BOOLEAN
        ] = 0.5,
        expected_version: Annotated[
            int | None,
            Field(ge=0, description="Only write on top of this version (0 = new)."),
            NOT_BOOLEAN,
        ] = None,
    ) -> Remembered:
        call = _resolve(binding, ctx)
        return await call.ns.records.remember(
            ref,
            value,
            agent=call.agent,
            session=call.session,
            tags=tags,
            confidence=confidence,
            expected_version=expected_version,
        )

    @mcp.tool(
        description=(
            "Read facts. With ref: that record's current version (or the given version). "
            "Without ref: current versions filtered by scope, tags and minimum confidence, in ref "
            "order; pass next_cursor back as cursor for more."
        )
    )
    @_as_tool_error
    async def recall(
        ctx: Context,
        ref: Annotated[str | None, Field(description="One record to read.")] = None,
        version: Annotated[
            int | None, Field(ge=1, description="A past version of ref."), NOT_BOOLEAN
        ] = None,
        scope: Annotated[str | None, Field(description="Records in this scope and below.")] = None,
        tags: Annotated[list[str], Field(description="Records carrying these tags.")] = [],  # noqa: B006
        tags_mode: Annotated[
            Literal["all", "any"], Field(description="Match all or any tag.")
        ] = "all",
        min_confidence: Annotated[float | None, Field(ge=0, le=1), NOT_BOOLEAN] = None,
        limit: Annotated[int, Field(ge=1, le=500), NOT_BOOLEAN] = 50,
        cursor: Annotated[
            str | None, Field(description="next_cursor of the previous page.")
        ] = None,
        query: Annotated[str | None, Field(description="Free text to match in values.")] = None,
    ) -> RecordVersion | RecordPage:
        call = _resolve(binding, ctx)
        if ref is not None:
            return await call.ns.records.recall(
                ref, version=version, agent=call.agent, session=call.session
            )
        return await call.ns.records.list_records(
            scope=scope,
            tags=tags,
            tags_mode=tags_mode,
            min_confidence=min_confidence,
            limit=limit,
            cursor=cursor,
            query=query,
        )

    @mcp.tool(
        description=(
            "Every version of a record, oldest first: value, author, time, confidence, and the "
            "hash chain linking them (chain_ok says whether each link verifies)."
        )
    )
    @_as_tool_error
    async def history(ref: Ref, ctx: Context) -> History:
        return await _resolve(binding, ctx).ns.records.history(ref)

    @mcp.tool(
        description=(
            "Hand work to another agent: a packet with a one-line summary, next steps and open "
            "questions goes into its queue. Pins are the record versions your work is built on; "
            "leave pins out to pin everything you read or wrote in this session. The receiver is "
            "told if a pinned record changes before it picks the packet up."
        )
    )
    @_as_tool_error
    async def handoff(
        to: Agent,
        summary: Annotated[str, Field(description="What is being handed over, in one line.")],
        ctx: Context,
        next: Annotated[list[str], Field(description="Concrete next steps.")] = [],  # noqa: B006
        open: Annotated[list[str], Field(description="Unanswered questions.")] = [],  # noqa: B006
        pins: Annotated[
            list[dict[str, Any]] | None,
            Field(description="[{ref, version}] to pin; version omitted = current."),
        ] = None,
        expires_in: Annotated[
            float | None,
            Field(gt=0, description="Seconds until unclaimed packet expires."),
            NOT_BOOLEAN,
        ] = None,
        note: str | None = None,
    ) -> Packet:
        call = _resolve(binding, ctx)
        return await call.ns.handoffs.handoff(
            from_agent=call.agent,
            to_agent=to,
            summary=summary,
            next_steps=next,
            open_questions=open,
            pins=pins,
            expires_in=expires_in,
            note=note,
            session=call.session,
        )

    @mcp.tool(
        description=(
            "Pick up the oldest packet handed to you. Returns the packet, its pinned records at "
            "the pinned versions, and a 'stale' list of pins whose record has a newer version: "
            "re-read those before acting. packet is null when nothing waits. Finish with "
            "record_outcome(handoff_id=...) to close it."
        )
    )
    @_as_tool_error
    async def resume(
        ctx: Context,
        lease_seconds: Annotated[
            float | None,
            Field(gt=0, description="How long you hold the packet (default 15 min)."),
            NOT_BOOLEAN,
        ] = None,
    ) -> Resumed:
        call = _resolve(binding, ctx)
        return await call.ns.handoffs.resume(
            call.agent, lease_seconds=lease_seconds, session=call.session
        )

    @mcp.tool(
        description=(
            "Report whether acting on some facts worked. success raises their confidence, "
            "failure lowers it; before and after are kept. refs defaults to every record you "
            "touched in this session. Pass handoff_id to close the packet you resumed."
        )
    )
    @_as_tool_error
    async def record_outcome(
        outcome: Annotated[Literal["success", "failure"], Field(description="What happened.")],
        outcome_ref: Annotated[str, Field(description="External reference, e.g. 'RUN-42'.")],
        ctx: Context,
        refs: Annotated[list[str] | None, Field(description="The facts the decision used.")] = None,
        note: str | None = None,
        handoff_id: Annotated[str | None, Field(description="Packet to complete.")] = None,
    ) -> OutcomeReport:
        call = _resolve(binding, ctx)
        return await call.ns.handoffs.record_outcome(
            outcome,
            outcome_ref,
            agent=call.agent,
            refs=refs,
            session=call.session,
            note=note,
            handoff_id=handoff_id,
        )

    @mcp.tool(
        description=(
            "Counts of records, versions, agents and outcomes, the average confidence and "
            "handoff packets by state; with verify=true also recheck every hash chain and list "
            "broken links."
        )
    )
    @_as_tool_error
    async def memory_stats(
        ctx: Context,
        verify: Annotated[bool, Field(description="Recompute every hash chain.")] = False,
    ) -> Stats:
        call = _resolve(binding, ctx)
        stats = await call.ns.verifier.stats(verify=verify)
        stats.handoffs = await call.ns.handoffs.counts()
        return stats

    _add_memory_tools(mcp, binding)
    return mcp


Csv = Annotated[str | list[str] | None, Field(description="A list, or a comma-separated string.")]


def _add_memory_tools(mcp: MCPServer, binding: Binding) -> None:
    """The coding-agent tools, with the parameter names of agentmemory's MCP server."""

    @mcp.tool(
        description=(
            "Save something worth remembering across sessions (a pattern, preference, "
            "architecture decision, bug, workflow or fact). Near-duplicates of an existing memory "
            "update it instead of adding a copy; similar ones are reported as similarTo."
        )
    )
    @_as_tool_error
    async def memory_save(
        content: Annotated[str, Field(description="What to remember.")],
        ctx: Context,
        type: Annotated[
            str | None,
            Field(description="pattern, preference, architecture, bug, workflow or fact."),
        ] = None,
        concepts: Csv = None,
        files: Csv = None,
        project: Annotated[str | None, Field(description="A stable project id.")] = None,
        agentId: str | None = None,
        ttlDays: Annotated[float | None, Field(gt=0), NOT_BOOLEAN] = None,
    ) -> shapes.Saved:
        call = _resolve(binding, ctx)
        saved = await call.ns.memories.save(
            content,
            type=type,
            concepts=concepts,
            files=files,
            project=project,
            agent_id=call.caller.acting_as(agentId).agent,
            ttl_days=ttlDays,
        )
        if not saved.success:
            raise ToolError(saved.error or "content is required")
        return shapes.saved(saved)

    @mcp.tool(
        description=(
            "Search saved memories and past observations (BM25). format: full, compact or "
            "narrative; token_budget caps the answer's size."
        )
    )
    @_as_tool_error
    async def memory_recall(
        query: str,
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=MAX_RECALL), NOT_BOOLEAN] = 10,
        format: Literal["full", "compact", "narrative"] = "full",
        token_budget: Annotated[int | None, Field(ge=1), NOT_BOOLEAN] = None,
        project: str | None = None,
        agentId: Annotated[
            str | None,
            Field(
                description="Only this agent's memories and "
                "shared ones (your own id, unless admin)."
            ),
        ] = None,
    ) -> shapes.Search:
        call = _resolve(binding, ctx)
        agent = call.caller.acting_as(agentId).agent if agentId else None
        found = await call.ns.memories.recall(query, limit=limit, project=project, agent_id=agent)
        return shapes.search(found.results, format, token_budget)

    @mcp.tool(
        description=(
            "Find memories and observations as compact hits, then expand the ids you want in "
            "full by calling again with expandIds."
        )
    )
    @_as_tool_error
    async def memory_smart_search(
        ctx: Context,
        query: str | None = None,
        expandIds: Csv = None,
        limit: Annotated[int, Field(ge=1, le=MAX_RECALL), NOT_BOOLEAN] = 10,
        project: str | None = None,
    ) -> shapes.SmartSearch:
        if not query and not expandIds:
            raise ToolError("give a query, or expandIds to expand")
        expand = split_list(expandIds, "expandIds")
        found = await _resolve(binding, ctx).ns.memories.smart_search(
            query=query, expand_ids=expand[: shapes.EXPAND_LIMIT], limit=limit, project=project
        )
        return shapes.smart_search(found.results, bool(expand), len(expand) > shapes.EXPAND_LIMIT)

    @mcp.tool(description="Recent sessions, newest first: where they ran and what they did.")
    @_as_tool_error
    async def memory_sessions(
        ctx: Context, limit: Annotated[int, Field(ge=1, le=500), NOT_BOOLEAN] = 20
    ) -> shapes.Sessions:
        return shapes.sessions(await _resolve(binding, ctx).ns.sessions.recent(limit))

    @mcp.tool(
        description=(
            "Forget a memory (memoryId), some observations of a session (sessionId + "
            "observationIds) or a whole session (sessionId). Audited."
        )
    )
    @_as_tool_error
    async def memory_forget(
        ctx: Context,
        memoryId: str | None = None,
        sessionId: str | None = None,
        observationIds: Csv = None,
        reason: str = "forgotten on request",
    ) -> Forgotten:
        call = _resolve(binding, ctx)
        return await call.ns.memories.forget(
            caller=call.caller,
            memory_id=memoryId,
            session_id=sessionId,
            observation_ids=split_list(observationIds, "observationIds") or None,
            reason=reason,
        )

    @mcp.tool(
        description=(
            "Where were we? Finds the last session for this working directory and answers with "
            "its open question first, what it touched, and one next step. Use when the user says "
            "'resume', 'where were we' or 'pick up where I left off'."
        )
    )
    @_as_tool_error
    async def memory_resume_here(
        ctx: Context,
        cwd: Annotated[
            str | None, Field(description="Working directory (absolute); default: this server's.")
        ] = None,
        override: Annotated[
            str | None, Field(description="Another project path, absolute or relative to cwd.")
        ] = None,
    ) -> ResumeHere:
        call = _resolve(binding, ctx)
        return await call.ns.sessions.resume_here(
            os.getcwd() if cwd is None else cwd, override=override, caller_session=call.session
        )


async def run_stdio(settings: Settings, agent: str) -> None:
    """Serve MCP on stdin/stdout as ``agent``: one process, one Baton session. The process
    holds the Redis URL itself, so it is a local operator (see ``baton.server.identity``).
    The session is created when the agent first reads or writes something, so a process
    that only starts and stops leaves no empty session behind."""
    async with open_backend(settings) as backend:
        caller = Caller(
            agent=agent,
            namespace=settings.namespace,
            credential=local(agent),
            session=f"s_{secrets.token_hex(8)}",
        )
        await create_mcp_server(Binding(caller=caller, backend=backend)).run_stdio_async()
