"""Request bodies in the OpenAPI document exactly as the server decodes them.

Litestar 2 builds a body's schema from its msgspec type but leaves out what msgspec
enforces: ``additionalProperties: false`` for a body that refuses unknown fields, the bounds
of an optional number (``lease_seconds > 0``), and that a body typed ``X | None`` may be
left out. A client generated from the document would send what the server refuses. Here
each body's schema is replaced by msgspec's own (the decoder's view of the type), and such
bodies are marked optional, by the plugins rendering the document (building it costs
~0.3 s: not at start-up). ``app.openapi_schema`` itself is left as Litestar builds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, get_args

import msgspec
from litestar import Litestar, Request
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.plugins import (
    JsonRenderPlugin,
    SwaggerRenderPlugin,
)
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


class CompletesBodies:
    """Mixed into a render plugin: it completes the request bodies of the document it
    renders (the document is Litestar's, built once and kept; msgspec's schemas are made
    once here)."""

    components: dict[str, Any] | None = None

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        if self.components is None:
            types = body_types(request.app)
            _, self.components = msgspec.json.schema_components(types, ref_template=REF_TEMPLATE)
        complete_request_bodies(openapi_schema, self.components)
        rendered: bytes = super().render(request, openapi_schema)  # type: ignore[misc]
        return rendered


class JsonWithExactBodies(CompletesBodies, JsonRenderPlugin):
    """``/schema/openapi.json``."""


class SwaggerWithExactBodies(CompletesBodies, SwaggerRenderPlugin):
    """``/schema`` and ``/schema/swagger``: Swagger UI's page, the document embedded, the
    viewer served from the copy in ``baton.server.static`` (swagger-ui-dist 5.18.2, the
    version Litestar pins; Apache-2.0, its LICENSE and NOTICE beside it): it works offline
    and never changes under the user."""


def complete_request_bodies(document: dict[str, Any], components: dict[str, Any]) -> None:
    """Put msgspec's schemas of the body types (and of the types inside them) into an
    OpenAPI ``document``, and mark bodies that may be left out as not required."""
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
