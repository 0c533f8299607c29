"""Baton as an MCP server: a tool for every operation of the table offered as one.

The tools are built from ``baton.server.operations`` on the SDK's low-level server: each
tool's ``inputSchema`` and ``outputSchema`` are msgspec's schemas of the operation's input
and result (the types REST decodes and answers), and arguments are decoded by the same
types. Over stdio (``baton mcp``) the process is one agent (``--agent`` or ``AGENT_ID``) and
one Baton session; over streamable HTTP (mounted at ``/mcp`` in the API) the caller is the
one the HTTP gate resolved for the request (token, headers; each MCP session is its own
Baton session). Any mistake a caller can make comes back as a tool result with
``isError: true`` and a message saying what to fix.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from typing import Any, Protocol, cast, get_args

import anyio
import mcp_types as types
import msgspec
import structlog
from anyio.abc import TaskGroup
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types.methods import serialize_server_result, validate_client_request
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from redis.exceptions import RedisError

from baton.queue.notifier import Notifier
from baton.server.mcp.mcp_messages import handshake_version, request_id
from baton.server.model.errors import BatonError
from baton.server.model.grants import record
from baton.server.model.identity import CALLER, REQUEST_CALLER, Caller, local
from baton.server.model.models import Notice
from baton.server.operation import Call, Operation
from baton.server.operations import OPERATIONS
from baton.server.runtime import codec
from baton.server.runtime.connection import async_redis, redis_url
from baton.server.runtime.failures import failure_of, tool_error_text
from baton.server.runtime.settings import Settings
from baton.server.stores.backend import Backend, open_backend
from baton.server.stores.notices import notice_of

log = structlog.get_logger("baton.mcp")

INSTRUCTIONS = """\
Baton is a memory shared by several agents. Facts are records addressed by a ref
`scope/key` (e.g. `listing/553/assessment`); writing one never overwrites, it adds a version.
Use `remember` for what you learn, `recall` before acting on a fact, `handoff` to pass work
to another agent, `resume` to pick up work handed to you (it tells you which facts changed
since the sender pinned them), and `record_outcome` to report whether acting on facts worked.
"""

SHOWN_DECIMALS = 4
# The fields holding figures Baton computes, rounded for a model; and those holding what an
# agent stored, never touched.
SHOWN_ROUNDED = frozenset(
    {"confidence", "before", "after", "average_confidence", "score", "similarity"}
)
STORED_DATA = frozenset({"value", "data", "details"})
TOOLS = {operation.name: operation for operation in OPERATIONS if operation.tool}
# The protocol version that deprecates logging (notifications/message, SEP-2577): from it on,
# notices come with the tool results over stdio too.
LOGGING_ENDS = "2026-07-28"
PUSH_WAIT_MS = 10_000  # one blocked read of the agent's notices at a time (< IO_TIMEOUT)


@dataclass
class Binding:
    """How tool calls find the store and the caller: ``caller`` is fixed for a stdio
    server (one process, one agent, one session); left None it is the one the HTTP gate
    resolved for each request."""

    caller: Caller | None = None
    backend: Backend | None = None


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


def schema_of(shape: Any) -> dict[str, Any]:
    """msgspec's JSON schema of ``shape`` (a Struct, or a union of Structs), self-contained:
    every ``$ref`` replaced by its definition (the types are not recursive)."""
    members = get_args(shape) or (shape,)
    _, definitions = msgspec.json.schema_components(members, ref_template="{name}")
    shapes = [_inlined(definitions[member.__name__], definitions) for member in members]
    return {**(shapes[0] if len(shapes) == 1 else {"anyOf": shapes}), "type": "object"}


def _untitled(schema: dict[str, Any]) -> dict[str, Any]:
    """An input schema without its type's name and docstring: a model reads the tool's
    name and description instead (every token of a tool list is read on every turn)."""
    return {key: value for key, value in schema.items() if key not in ("title", "description")}


def _inlined(schema: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(schema, list):
        return [_inlined(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _inlined(definitions[schema["$ref"]], definitions)
    return {key: _inlined(value, definitions) for key, value in schema.items()}


# MCP's tool annotations for each effect (operation.Effect). No tool reaches outside Baton.
ANNOTATIONS = {
    "reads": types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "writes": types.ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    ),
    "forgets": types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    ),
}


def tool_of(operation: Operation[Any, Any]) -> types.Tool:
    """The MCP tool of an operation: its wire input's schema and its result's, and the
    annotations of its effect."""
    return types.Tool(
        name=operation.name,
        description=operation.description,
        input_schema=_untitled(schema_of(operation.wire_input)),
        output_schema=schema_of(operation.result),
        annotations=ANNOTATIONS[operation.effect],
    )


@cache
def tool_list() -> list[types.Tool]:
    """Every tool, in the table's order (built once)."""
    return [tool_of(operation) for operation in TOOLS.values()]


def input_schema(name: str) -> dict[str, Any] | None:
    """The input schema of the tool ``name`` (None for no such tool): the SDK checks a
    stateless (2026) call's ``Mcp-Param-*`` headers against it before each call."""
    return next((tool.input_schema for tool in tool_list() if tool.name == name), None)


async def call_tool(
    backend: Backend | None,
    caller: Caller | None,
    name: str,
    arguments: dict[str, Any],
    *,
    carry_notices: bool = False,
) -> types.CallToolResult:
    """Run the tool ``name`` as ``caller``: its result as structured content (and as JSON
    text), or Baton's error as an ``isError`` result; with ``carry_notices`` (a transport
    that cannot push them), followed by the caller's notices since its previous call."""
    operation = TOOLS.get(name)
    if operation is None:
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")
    try:
        if backend is None:
            raise Unavailable("Baton is still starting; try again in a moment")
        if caller is None:
            raise Unavailable("no caller: this transport carries no identity")
        call = Call(caller, backend.namespace(caller.namespace))
        REQUEST_CALLER.set(caller)  # what runs in the call counts against its token
        result = await operation.perform(call, operation.decode(arguments))
    except Exception as error:
        failure = failure_of(error)
        if failure.kind == "unexpected":
            log.exception("tool failed", tool=name)
        text = tool_error_text(failure)
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
    shown = rounded(msgspec.to_builtins(result))
    content: list[types.ContentBlock] = [
        types.TextContent(text=json.dumps(shown, ensure_ascii=False))
    ]
    if carry_notices and caller.session is not None:
        content += await carried_notices(call, caller.session)
    return types.CallToolResult(content=content, structured_content=shown)


async def carried_notices(call: Call, session: str) -> list[types.TextContent]:
    """The caller's notices since its session's previous tool call, as one text block
    (none when there are none); those of records its grants do not cover are left out. A
    failure to read them costs the block, never the tool's result."""
    try:
        found = await call.ns.notices.since_last_call(session, call.caller.agent)
        rights = await call.ns.grants.rights(call.caller) if found else None
    except RedisError as error:
        log.warning("notices not carried", error=str(error))
        return []
    shown = [n for n in found if rights is None or rights.may(record(n.ref))]
    if not shown:
        return []
    return [types.TextContent(text=notices_text(shown))]


def notices_text(notices: list[Notice]) -> str:
    """Notices as a model reads them: what moved, in which packet, by whom, and what to do."""
    lines = [
        f"- {n.ref}: pinned at v{n.pinned_version} in packet {n.packet}, now v{n.version} "
        f"(written by {n.author} at {n.at})"
        for n in notices
    ]
    return "Baton notices: facts your packets pin moved on. Re-read them before acting.\n" + (
        "\n".join(lines)
    )


class Unavailable(BatonError):
    """A tool called before Baton can serve it."""

    status_code = 503
    title = "Unavailable"
    kind = "unavailable"


def create_mcp_server(binding: Binding) -> Server[Any]:
    """The MCP server with Baton's tools, bound to ``binding``."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list())

    async def run_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        caller = binding.caller
        if caller is None and ctx.request is not None:  # over HTTP, which cannot push
            caller = ctx.request.scope.get("state", {}).get(CALLER)
            return await call_tool(
                binding.backend, caller, params.name, params.arguments or {}, carry_notices=True
            )
        return await call_tool(binding.backend, caller, params.name, params.arguments or {})

    return Server(
        "baton",
        version=version("baton-server"),
        instructions=INSTRUCTIONS,
        get_tool_input_schema=input_schema,
        on_list_tools=list_tools,
        on_call_tool=run_tool,
    )


class LineWriter(Protocol):
    """Where the stdio transport writes its lines (as ``anyio.AsyncFile[str]`` does)."""

    async def write(self, text: str) -> Any: ...

    async def flush(self) -> Any: ...


async def serve_lines(binding: Binding, lines: AsyncIterable[str], out: LineWriter) -> None:
    """Baton's MCP server reading JSON-RPC lines from ``lines`` and writing to ``out``
    (the SDK's stdio transport, over streams given to it)."""
    server = create_mcp_server(binding)
    streams = stdio_server(cast("anyio.AsyncFile[str]", lines), cast("anyio.AsyncFile[str]", out))
    async with streams as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class ToolCalls:
    """Over stdio, the tool calls answered without the SDK's request loop, which costs
    about 15 % of a call at an empty store. Answered as the SDK's server answers them: the
    request checked, and the result shaped, by the SDK's own surface of the protocol version
    the conversation agreed on (``mcp_types.methods``), the tool run by :func:`call_tool`.
    Every other message, a tool call before ``initialize`` or one the SDK would refuse
    included, is the SDK's. A call runs to its end: a cancellation is the SDK's to ignore."""

    def __init__(self, binding: Binding, out: LineWriter, calls: TaskGroup) -> None:
        self.binding = binding
        self.out = out
        self.calls = calls
        self.version: str | None = None  # agreed by initialize

    async def others(self, lines: AsyncIterable[str]) -> AsyncIterator[str]:
        """The lines for the SDK: all but the tool calls, which are answered meanwhile."""
        async for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if self.version is None:
                self.version = handshake_version(message, HANDSHAKE_PROTOCOL_VERSIONS)
            elif self.ours(message):
                self.calls.start_soon(self.answer, message["id"], message["params"], self.version)
                continue
            yield line

    def ours(self, message: Any) -> bool:
        if request_id(message) is None or message.get("method") != "tools/call":
            return False
        if not isinstance(message.get("params"), dict) or "_meta" in message["params"]:
            return False  # a progress token, or the 2026 protocol's envelope: the SDK's
        try:
            validate_client_request("tools/call", cast(str, self.version), message.get("params"))
        except ValueError:  # pydantic's ValidationError: the SDK's to answer
            return False
        return message["params"]["name"] in TOOLS

    @property
    def pushes(self) -> bool:
        """Whether the agreed protocol version has ``notifications/message``."""
        return self.version is not None and self.version < LOGGING_ENDS

    async def answer(self, id: int | str, params: dict[str, Any], version: str) -> None:
        result = await call_tool(
            self.binding.backend,
            self.binding.caller,
            params["name"],
            params.get("arguments") or {},
            carry_notices=not self.pushes,
        )
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": id}
        try:
            answer["result"] = serialize_server_result("tools/call", version, dumped)
        except ValueError:  # a result its own schema refuses: Baton's bug, the SDK's answer
            log.exception("tool result refused by the protocol's schema", tool=params["name"])
            answer["error"] = INVALID_RESULT
        await self.out.write(json.dumps(answer, ensure_ascii=False, separators=(",", ":")) + "\n")
        await self.out.flush()


INVALID_RESULT = {"code": types.INTERNAL_ERROR, "message": "Handler returned an invalid result"}


async def serve_stdio(binding: Binding, lines: AsyncIterable[str], out: LineWriter) -> None:
    """Baton's MCP server over stdio: tool calls answered by :class:`ToolCalls`, the rest
    of the conversation by the SDK's server, and the agent's notices pushed
    (:func:`push_notices`) while it lasts."""
    async with anyio.create_task_group() as pushing:
        async with anyio.create_task_group() as calls:
            tool_calls = ToolCalls(binding, out, calls)
            pushing.start_soon(push_notices, binding, out, tool_calls)
            await serve_lines(binding, tool_calls.others(lines), out)
        pushing.cancel_scope.cancel()


async def push_notices(binding: Binding, out: LineWriter, calls: ToolCalls) -> None:
    """Over stdio, each notice made for the agent from now on, as a
    ``notifications/message`` (level ``warning``, logger ``baton.notices``, the notice as
    its data) once the conversation agreed on a protocol version that has them (before
    :data:`LOGGING_ENDS`; later ones get the notices with the tool results instead)."""
    backend, caller = binding.backend, binding.caller
    if backend is None or caller is None:
        return
    ns = backend.namespace(caller.namespace)
    key = ns.keys.notices(caller.agent)
    last = await ns.notices.newest(caller.agent)
    while True:
        try:
            reply = await backend.redis.xread({key: last}, block=PUSH_WAIT_MS, count=100)
            rights = await ns.grants.rights(caller) if reply else None
        except RedisError as error:
            log.warning("notices not pushed; trying again", error=str(error))
            await anyio.sleep(1)
            continue
        for entry_id, fields in codec.read_entries(reply):
            last = entry_id.decode()
            notice = notice_of(entry_id, fields)
            if not calls.pushes or (rights is not None and not rights.may(record(notice.ref))):
                continue
            params = {"level": "warning", "logger": "baton.notices", "data": notice}
            message = {"jsonrpc": "2.0", "method": "notifications/message", "params": params}
            await out.write(msgspec.json.encode(message).decode() + "\n")
            await out.flush()


async def run_stdio(
    settings: Settings, agent: str, lines: AsyncIterable[str], out: LineWriter
) -> None:
    """Serve MCP as ``agent`` over ``lines`` and ``out`` (stdin and stdout, by way of
    ``baton.server.mcp.mcp_stdio``): one process, one Baton session. The process holds the
    Redis URL itself, so it is a local operator (see ``baton.server.model.identity``). The session
    is created when the agent first reads or writes something, so a process that only
    starts and stops leaves no empty session behind. Unless ``BATON_NOTICES`` is off, the
    process makes notices as ``baton serve`` does (where no server runs, MCP processes are
    all there is to make them)."""
    async with (
        open_backend(settings) as backend,
        async_redis(redis_url(settings)) as waiting,  # the notifier's waiting read
        anyio.create_task_group() as notifying,
    ):
        if settings.notices:
            notifying.start_soon(Notifier(backend, waiting).run_forever)
        caller = Caller(
            agent=agent,
            namespace=settings.namespace,
            credential=local(agent),
            session=f"s_{secrets.token_hex(8)}",
        )
        await serve_stdio(Binding(caller=caller, backend=backend), lines, out)
        notifying.cancel_scope.cancel()


class Collected:
    """A :class:`LineWriter` keeping what is written, until ``expected`` lines came."""

    def __init__(self, expected: int) -> None:
        self.lines: list[str] = []
        self.expected = expected
        self.done = anyio.Event()

    async def write(self, text: str) -> None:
        self.lines.append(text)
        if len(self.lines) == self.expected:
            self.done.set()

    async def flush(self) -> None:
        pass


class Serve(Protocol):
    async def __call__(
        self, binding: Binding, lines: AsyncIterable[str], out: LineWriter
    ) -> None: ...


async def answers(
    requests: list[dict[str, Any]], binding: Binding | None = None, serve: Serve = serve_lines
) -> list[Any]:
    """What ``serve`` (by default the SDK's server alone) answers ``requests`` (JSON-RPC
    messages; those with an id are answered) with, in the order written."""
    out = Collected(sum("id" in request for request in requests))

    async def each() -> AsyncIterator[str]:
        for request in requests:
            yield json.dumps(request) + "\n"
        await out.done.wait()  # the end of the input ends the server

    with anyio.fail_after(30):
        await serve(binding or Binding(), each(), out)
    return [json.loads(line) for line in out.lines]


def initialize_request(version: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "baton", "version": "0"},
        },
    }


async def early_answers() -> dict[str, Any]:
    """What ``baton mcp`` answers before the SDK is loaded (``mcp_answers.json``), as the
    SDK's server answers it: ``initialize`` (less the negotiated version), ``tools/list``,
    and the protocol versions the handshake negotiates, oldest first."""
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    initialize, tools = await answers([initialize_request("0"), initialized, listing])
    initialize["result"].pop("protocolVersion")
    return {
        "versions": list(HANDSHAKE_PROTOCOL_VERSIONS),
        "initialize": initialize["result"],
        "tools/list": tools["result"],
    }


if __name__ == "__main__":  # make mcp-answers
    print(json.dumps(anyio.run(early_answers), indent=1, ensure_ascii=False))
