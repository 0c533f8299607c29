"""What an operation is: one input type, one result type, one core function, and the
surfaces it is offered on. The table of Baton's operations is ``baton.server.operations``;
the surfaces (REST routes, MCP tools, agentmemory's routes, the Python client) are built
from it, so an operation is written once and validated the same way everywhere.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from functools import cache
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    Literal,
    TypeVar,
    get_args,
    get_origin,
    get_type_hints,
)

import msgspec

from baton.server.model.errors import InvalidInput
from baton.server.model.grants import Denied, Need, Rights, unguarded
from baton.server.model.validation import in_words

if TYPE_CHECKING:
    from baton.server.model.identity import Caller
    from baton.server.stores.backend import Namespace

I = TypeVar("I", bound=msgspec.Struct)  # noqa: E741 (the input, as in the SDKs' own generics)
R = TypeVar("R")

# "baton": snake_case wire names; "agentmemory": agentmemory's camelCase, a view of the same
# input type (explicit field names, such as agentmemory's own ``token_budget``, are kept).
Naming = Literal["baton", "agentmemory"]
# What a tool does to the store, as its MCP annotations tell a host: "reads" changes nothing
# a person would call data (reading still notes what a session saw, for its pins); "writes"
# adds (a version, a packet, a move of confidence: every earlier state stays readable);
# "forgets" deletes.
Effect = Literal["reads", "writes", "forgets"]
PATH_FIELD = re.compile(r"{(\w+)(?::(\w+))?}")
AT_FIELD = re.compile(r"at `\$\.([A-Za-z_][\w.\[\]]*)")
UNKNOWN_FIELD = re.compile(r"unknown field `([^`]+)`")
MISSING_FIELD = re.compile(r"missing required field `([^`]+)`")


@dataclass(frozen=True)
class Route:
    """An HTTP route: path fields (``{ref:path}``) are input fields; a GET reads the others
    from the query, any other method from a JSON body."""

    method: Literal["GET", "POST", "DELETE"]
    path: str
    summary: str | None = None  # the OpenAPI summary, where the description's words do not do
    status: int = 200
    problems: tuple[int, ...] = ()

    @property
    def path_fields(self) -> dict[str, str]:
        """Each path field and its Litestar type (``str``, ``path``)."""
        return {name: kind or "str" for name, kind in PATH_FIELD.findall(self.path)}


@dataclass(frozen=True)
class Call:
    """Who runs an operation, the stores of the namespace it runs in, and what grants let
    the caller reach there (None: nothing is restricted for it)."""

    caller: Caller
    ns: Namespace
    rights: Rights | None = None

    def may(self, need: Need) -> bool:
        return self.rights is None or self.rights.may(need)


Needs = Callable[[Call, Any], Awaitable[Iterable[Need]]]
Shows = Callable[[Rights, Any], Any]


async def reaches_nothing(call: Call, given: Any) -> Iterable[Need]:
    return ()


def shows_all(rights: Rights, result: Any) -> Any:
    return result


@dataclass(frozen=True)
class Guard:
    """What an operation reaches, declared beside it in the table: ``needs`` before it runs
    (from its input, reading the store where the input names things by id), ``shows`` what
    of its result the agent may see (a listing filtered, a single item refused)."""

    needs: Needs = reaches_nothing
    shows: Shows = shows_all


OPEN = Guard()  # reaches nothing that grants restrict (the agent's own inbox, counts)


@dataclass(frozen=True)
class View(Generic[I, R]):
    """An operation as agentmemory offers it: the same input and core under agentmemory's
    name, words and route, its answer in agentmemory's shape (``shape``, from the input and
    the answer the agent may see); ``narrow`` takes the input to agentmemory's own limits."""

    name: str
    description: str
    result: Any
    shape: Callable[[I, R], Any]
    route: Route | None = None
    tool: bool = False
    narrow: Callable[[I], I] | None = None


@dataclass(frozen=True, eq=False)
class Operation(Generic[I, R]):
    """One operation. ``rest`` is its route under Baton's REST API (problem+json errors);
    ``effect`` is what it does to the store (a tool's annotations; whether its answer waits
    for the write to be durable); ``tool`` offers it as an MCP tool named ``name``;
    ``agentmemory`` is its route among
    agentmemory's (``{"error"}`` answers); ``naming`` decides the names its input takes on
    the wire of MCP and agentmemory's routes (Baton's REST API always uses Baton's);
    ``guard`` is what it reaches that grants restrict (``baton.server.model.grants``; None:
    refused to agents with grants); ``view`` offers it in agentmemory's words as well
    (:meth:`offered`), and ``shape`` is set on that view's operation only; ``example`` is a
    request the docs show (the OpenAPI document) and the security matrices send."""

    name: str
    description: str
    input: type[I]
    result: Any
    run: Callable[[Call, I], Awaitable[R]]
    effect: Effect
    tag: str = ""
    rest: Route | None = None
    tool: bool = False
    agentmemory: Route | None = None
    naming: Naming = "baton"
    guard: Guard | None = None
    view: View[I, R] | None = None
    shape: Callable[[I, R], Any] | None = None
    example: dict[str, Any] | None = None  # a request, fields in Baton's names (path ones too)

    @classmethod
    def of(
        cls, run: Callable[[Call, I], Awaitable[R]], *, name: str | None = None, **surfaces: Any
    ) -> Operation[I, R]:
        """The operation ``run`` performs, declared beside it: named after it (or ``name``),
        described by the first paragraph of its docstring, its input and result read from
        its annotations; ``surfaces`` are the other fields."""
        hints = get_type_hints(run)
        given = list(inspect.signature(run).parameters)[1]
        doc = inspect.getdoc(run)
        if not doc:
            raise TypeError(f"{run.__name__}: its docstring is the operation's description")
        description = " ".join(doc.split("\n\n")[0].split())
        return cls(
            name or run.__name__,
            description,
            hints[given],
            hints["return"],
            run,
            **surfaces,
        )

    def offered(self) -> tuple[Operation[I, Any], ...]:
        """The operation, and its view as an operation of its own (agentmemory's tool and
        route): one core, two answers."""
        view = self.view
        if view is None:
            return (self,)
        narrow, run = view.narrow, self.run

        async def narrowed(call: Call, given: I) -> R:
            return await run(call, narrow(given) if narrow else given)

        as_viewed = replace(
            self,
            name=view.name,
            description=view.description,
            result=view.result,
            run=narrowed,
            tag="",
            rest=None,
            tool=view.tool,
            agentmemory=view.route,
            naming="agentmemory",
            view=None,
            shape=view.shape,
        )
        return (self, as_viewed)

    @property
    def wire_input(self) -> type[msgspec.Struct]:
        """The input type as MCP and agentmemory's routes spell it."""
        return self.wire_type(self.naming)

    def example_in(self, naming: Naming) -> dict[str, Any]:
        """The example's fields as ``naming`` spells them on the wire."""
        wire = msgspec.structs.fields(self.wire_type(naming))
        names = {info.name: info.encode_name for info in wire}
        return {names[name]: value for name, value in (self.example or {}).items()}

    def wire_type(self, naming: Naming) -> type[msgspec.Struct]:
        """The input type with ``naming``'s wire names."""
        return self.input if naming == "baton" else camel_view(self.input)

    async def perform(self, call: Call, given: I) -> R:
        """Run the operation; a write's answer waits until Redis has the write in its
        append-only file where it must (``Namespace.durable``), so that what a caller is
        told was done survives a kill of Redis."""
        rights = await call.ns.grants.rights(call.caller)
        try:
            if rights is not None:
                if rights.confined:
                    if self.guard is None:
                        raise Denied(rights.agent, unguarded(self.name))
                    rights.require(await self.guard.needs(call, given))
                call = Call(call.caller, call.ns, rights)
            result = await self.run(call, given)
            if rights is not None and self.guard is not None:
                result = self.guard.shows(rights, result)
            if self.shape is not None:
                result = self.shape(given, result)
        except Denied as denied:
            await call.ns.grants.audit_denial(denied.agent, denied.need.text())
            raise
        if self.effect != "reads":
            await call.ns.durable()
        return result

    def decode(self, arguments: Any, naming: Naming | None = None) -> I:
        """Arguments (a JSON object, names as ``naming`` spells them, by default the
        operation's own) as the input, numbers written as text read as numbers; a mistake is
        :class:`InvalidInput` naming the field."""
        wire_type = self.wire_type(naming or self.naming)
        try:
            wire = msgspec.convert(arguments, wire_type, strict=False)
        except msgspec.ValidationError as error:
            raise invalid(error, wire_type) from None
        if wire_type is self.input:
            return wire  # type: ignore[return-value]
        return self.input(**msgspec.structs.asdict(wire))


def invalid(
    error: msgspec.ValidationError, struct: type[msgspec.Struct] | None = None
) -> InvalidInput:
    """msgspec's refusal as :class:`InvalidInput` naming the field (``body`` when none; an
    item as ``next[1]``), in words (``validation.in_words``); a value not among a field of
    ``struct``'s choices says them."""
    text = str(error)
    if found := MISSING_FIELD.search(text):
        return InvalidInput(found.group(1), f"{found.group(1)} is required")
    if found := UNKNOWN_FIELD.search(text):
        return InvalidInput(found.group(1), f"{found.group(1)} is not a known field")
    if found := AT_FIELD.search(text):
        field, said = found.group(1), in_words(text.split(" - at `")[0])
        if said.startswith("Invalid enum value") and struct is not None:
            choices = _choices(struct, re.split(r"[.\[]", field)[0])
            said = f"must be one of {', '.join(choices)}" if choices else said
        return InvalidInput(field, said)
    return InvalidInput("body", text)


def _choices(struct: type[msgspec.Struct], name: str) -> tuple[str, ...]:
    """The values a field (by its wire name) takes, when its type is a ``Literal``."""
    for info in msgspec.structs.fields(struct):
        if info.encode_name == name:
            for member in (info.type, *get_args(info.type)):
                if get_origin(member) is Literal:
                    return tuple(str(choice) for choice in get_args(member))
    return ()


@cache
def camel_view(struct: type[msgspec.Struct]) -> type[msgspec.Struct]:
    """``struct`` with camelCase wire names; the fields it lists in ``CAMEL_EXCEPTIONS``
    keep theirs (agentmemory's own ``token_budget``)."""
    keep: frozenset[str] = getattr(struct, "CAMEL_EXCEPTIONS", frozenset())
    renamed = {
        info.name: info.name if info.name in keep else _camel(info.encode_name)
        for info in msgspec.structs.fields(struct)
    }
    return derived(struct, struct.__name__, rename=renamed)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def derived(
    struct: type[msgspec.Struct],
    name: str,
    *,
    rename: dict[str, str] | None = None,
    without: tuple[str, ...] = (),
) -> type[msgspec.Struct]:
    """A struct with ``struct``'s fields but ``without``: same types, bounds, defaults and
    explicit wire names, unknown fields refused."""
    fields = []
    for info in msgspec.structs.fields(struct):
        if info.name in without:
            continue
        options: dict[str, Any] = {}
        if info.default is not msgspec.NODEFAULT:
            options["default"] = info.default
        if info.default_factory is not msgspec.NODEFAULT:
            options["default_factory"] = info.default_factory
        if info.encode_name != info.name and rename is None:
            options["name"] = info.encode_name
        fields.append((info.name, info.type, msgspec.field(**options)))
    return msgspec.defstruct(
        name,
        fields,
        kw_only=True,
        forbid_unknown_fields=True,
        rename=rename,
        module=struct.__module__,
    )
