"""Baton's REST routes, one per operation of the table (``baton.server.operations``).

Each route's handler is built from its operation: path fields from the path, a GET's other
fields from the query, any other method's from a JSON body typed as the input itself (or as
the input without its path fields). Litestar decodes and validates them, and documents them
in the OpenAPI schema, from the same msgspec types the MCP tools publish.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any, get_args, get_origin

import msgspec
from litestar import route
from litestar.constants import RESERVED_KWARGS
from litestar.enums import RequestEncodingType
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.spec import Example
from litestar.params import Body, PathParameter, QueryParameter

from baton.server.api.deps import CallerDep, NamespaceDep
from baton.server.api.problems import problems
from baton.server.model.identity import Caller
from baton.server.operation import Call, Operation, derived
from baton.server.operations import OPERATIONS

PATH = PathParameter()


def body_type(input_type: type[msgspec.Struct], path: tuple[str, ...]) -> type[msgspec.Struct]:
    """The JSON body of a route: the input, without the fields its path carries."""
    if not path:
        return input_type
    return derived(input_type, f"{input_type.__name__.removesuffix('Input')}Body", without=path)


def _kwarg(name: str) -> str:
    """A query field's parameter name in the handler (Litestar reserves ``scope``,
    ``query``…; the query parameter keeps the field's name)."""
    return f"{name}_" if name in RESERVED_KWARGS else name


def _required(info: msgspec.structs.FieldInfo) -> bool:
    return info.default is msgspec.NODEFAULT and info.default_factory is msgspec.NODEFAULT


def rest_handler(operation: Operation[Any, Any]) -> HTTPRouteHandler:
    """The route handler of ``operation`` (which has a ``rest`` route)."""
    spec = operation.rest
    assert spec is not None
    path_kinds = spec.path_fields
    fields = {info.name: info for info in msgspec.structs.fields(operation.input)}
    parameters = [
        inspect.Parameter("ns", inspect.Parameter.KEYWORD_ONLY, annotation=NamespaceDep),
        inspect.Parameter("caller", inspect.Parameter.KEYWORD_ONLY, annotation=CallerDep),
    ]
    parameters += [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[fields[name].type, PATH]
        )
        for name in path_kinds
    ]
    example = operation.example_in("baton")
    query: dict[str, str] = {}
    if spec.method == "GET":
        query = {_kwarg(name): name for name in fields if name not in path_kinds}
        parameters += [
            inspect.Parameter(
                kwarg,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=Annotated[
                    info.type if _required(info) else info.type | None,
                    QueryParameter(
                        name=info.encode_name,
                        examples=_shown(example, info.encode_name),
                        **_bounds(info.type),
                    ),
                ],
                default=inspect.Parameter.empty if _required(info) else _shown_default(info),
            )
            for kwarg, info in zip(query, (fields[name] for name in query.values()), strict=True)
        ]
    else:
        body = body_type(operation.input, tuple(path_kinds))
        fields_of_body = {info.encode_name for info in msgspec.structs.fields(body)}
        shown = {name: value for name, value in example.items() if name in fields_of_body}
        optional = not any(_required(info) for info in msgspec.structs.fields(body))
        parameters.append(
            inspect.Parameter(
                "data",
                inspect.Parameter.KEYWORD_ONLY,
                annotation=Annotated[
                    body | None if optional else body,
                    Body(
                        media_type=RequestEncodingType.JSON,
                        examples=[Example(value=shown)] if shown else None,
                    ),
                ],
                default=None if optional else inspect.Parameter.empty,
            )
        )

    async def handler(ns: Any, caller: Caller, **given: Any) -> Any:
        values = {
            name: value.lstrip("/") if path_kinds[name] == "path" else value
            for name, value in given.items()
            if name in path_kinds
        }
        data = given.get("data")
        if data is not None:
            values.update(msgspec.structs.asdict(data))
        values.update(
            (query[kwarg], value)
            for kwarg, value in given.items()
            if kwarg in query and value is not None  # left out: the input's default
        )
        return await operation.perform(Call(caller, ns), operation.input(**values))

    handler.__name__ = handler.__qualname__ = operation.name
    handler.__doc__ = operation.description
    handler.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        parameters, return_annotation=operation.result
    )
    handler.__annotations__ = {p.name: p.annotation for p in parameters} | {
        "return": operation.result
    }
    return route(
        spec.path,
        http_method=spec.method,
        name=f"operation:{operation.name}",
        summary=spec.summary or operation.description.rstrip("."),
        description=operation.description,
        status_code=spec.status,
        responses=problems(*spec.problems),
        tags=[operation.tag] if operation.tag else None,
    )(handler)


def _bounds(annotation: Any) -> dict[str, Any]:
    """The bounds msgspec declares on a query field's type, for Litestar to document."""
    for member in (annotation, *get_args(annotation)):
        for meta in get_args(member)[1:] if get_origin(member) is Annotated else ():
            if isinstance(meta, msgspec.Meta):
                return {
                    name: getattr(meta, name)
                    for name in ("ge", "le", "gt", "lt", "min_length", "max_length")
                    if getattr(meta, name) is not None
                }
    return {}


def _shown(example: dict[str, Any], name: str) -> list[Example] | None:
    """The operation's example value of a query field, as the document shows it."""
    return [Example(value=example[name])] if name in example else None


def _shown_default(info: msgspec.structs.FieldInfo) -> Any:
    """A query field's default as Litestar documents it (a list default is left out)."""
    return None if info.default is msgspec.NODEFAULT else info.default


def rest_handlers() -> list[HTTPRouteHandler]:
    """The REST routes of every operation that has one."""
    return [rest_handler(operation) for operation in OPERATIONS if operation.rest is not None]
