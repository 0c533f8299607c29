"""Request bodies in the OpenAPI document exactly as the server decodes them.

Litestar 2 builds a body's schema from its msgspec type but leaves out what msgspec
enforces: ``additionalProperties: false`` for a body that refuses unknown fields, the bounds
of an optional number (``lease_seconds > 0``), and that a body typed ``X | None`` may be
left out. A client generated from the document would send what the server refuses. Here
each body's schema is replaced by msgspec's own (the decoder's view of the type), and such
bodies are marked optional, when ``/schema/openapi.json`` is first rendered (building the
document costs ~0.3 s: not at start-up).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, get_args

import msgspec
from litestar import Litestar, Request
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.routes import HTTPRoute

REF_TEMPLATE = "#/components/schemas/{name}"


def body_types(app: Litestar) -> list[type[msgspec.Struct]]:
    """The msgspec types the documented routes decode their bodies into."""
    found: dict[str, type[msgspec.Struct]] = {}
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            if not isinstance(handler, HTTPRouteHandler) or not handler.resolve_include_in_schema():
                continue
            data = handler.parsed_fn_signature.parameters.get("data")
            if data is not None:
                found.update((struct.__name__, struct) for struct in _structs(data.annotation))
    return list(found.values())


def _structs(annotation: Any) -> Iterator[type[msgspec.Struct]]:
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        yield annotation
    for argument in get_args(annotation):
        yield from _structs(argument)


class ExactBodiesJson(JsonRenderPlugin):
    """``/schema/openapi.json``, its request bodies completed on the first render (the
    document is built once and kept by Litestar, so once is enough)."""

    def __init__(self) -> None:
        super().__init__()
        self.completed = False

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        if not self.completed:
            complete_request_bodies(request.app, openapi_schema)
            self.completed = True
        return super().render(request, openapi_schema)


def complete_request_bodies(app: Litestar, document: dict[str, Any]) -> None:
    """Put msgspec's schema of every body type (and of the types inside them) into the
    app's OpenAPI ``document``, and mark bodies that may be left out as not required."""
    _, components = msgspec.json.schema_components(body_types(app), ref_template=REF_TEMPLATE)
    document.setdefault("components", {}).setdefault("schemas", {}).update(components)
    for path_item in document.get("paths", {}).values():
        for operation in path_item.values():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            if body is not None and _nullable(body):
                body["required"] = False


def _nullable(body: dict[str, Any]) -> bool:
    """Whether a request body's JSON schema admits null (the body may be left out)."""
    for content in body.get("content", {}).values():
        schema = content.get("schema", {})
        members = schema.get("oneOf") or schema.get("anyOf") or []
        if any(member.get("type") == "null" for member in members):
            return True
    return False
