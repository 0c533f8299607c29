"""The operation table is the one definition of each operation: every surface it declares is
built from it, and the surfaces publish the same schema (iterated from the table, so a new
operation is covered without being listed here)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from litestar import Litestar
from litestar.routes import HTTPRoute

from baton.agents.client import request
from baton.server.api.app import create_app
from baton.server.api.openapi_bodies import body_types, complete_request_bodies
from baton.server.mcp.mcp_server import schema_of, tool_list
from baton.server.operation import Operation
from baton.server.operations import OPERATIONS
from baton.server.runtime.settings import Settings

# Names a path gives a field that Litestar writes without its type (``{ref:path}`` -> ref).
BOTH = [op for op in OPERATIONS if op.rest is not None and op.tool]
TOOLS = {tool.name: tool for tool in tool_list()}


@pytest.fixture(scope="module")
def app() -> Litestar:
    return create_app(Settings(redis_url="redis://127.0.0.1:1"))


@pytest.fixture(scope="module")
def document(app: Litestar) -> dict[str, Any]:
    """The OpenAPI document as ``/schema/openapi.json`` serves it (exact request bodies)."""
    built = app.openapi_schema.to_schema()
    _, components = msgspec.json.schema_components(
        body_types(app), ref_template="#/components/schemas/{name}"
    )
    complete_request_bodies(built, components)
    return built


def openapi_operation(document: dict[str, Any], operation: Operation[Any, Any]) -> dict[str, Any]:
    assert operation.rest is not None
    path = operation.rest.path
    for name, kind in operation.rest.path_fields.items():
        path = path.replace(f"{{{name}:{kind}}}", f"{{{name}}}")
    found: dict[str, Any] = document["paths"][path][operation.rest.method.lower()]
    return found


def resolved(schema: Any, document: dict[str, Any]) -> Any:
    """``schema`` with the document's ``$ref``s replaced by what they name."""
    if isinstance(schema, list):
        return [resolved(item, document) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return resolved(
            document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]], document
        )
    return {key: resolved(value, document) for key, value in schema.items()}


def openapi_input(document: dict[str, Any], operation: Operation[Any, Any]) -> dict[str, Any]:
    """The operation's REST input as one object schema: its body's properties (msgspec's
    schema) and its path and query parameters (by name, required or not)."""
    spec = openapi_operation(document, operation)
    properties: dict[str, Any] = {}
    required: set[str] = set()
    if "requestBody" in spec:
        body = resolved(spec["requestBody"]["content"]["application/json"]["schema"], document)
        body = object_of(body)
        properties |= body.get("properties", {})
        required |= set(body.get("required", []))
    for parameter in spec.get("parameters", []):
        properties[parameter["name"]] = parameter["schema"]
        if parameter.get("required"):
            required.add(parameter["name"])
    return {"properties": properties, "required": required}


def object_of(schema: dict[str, Any]) -> dict[str, Any]:
    """The object schema of a body that may be left out (``X | None``), or that carries
    an example (Litestar wraps it as ``allOf: [X]`` beside ``examples``)."""
    members = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf") or [schema]
    return next(member for member in members if member.get("type") == "object")


def wire_names(operation: Operation[Any, Any]) -> dict[str, str]:
    """REST's name of each field (Baton's) -> the tool's (the documented renames: the
    operation's naming, see docs/architecture.md)."""
    return {
        rest.encode_name: tool.encode_name
        for rest, tool in zip(
            msgspec.structs.fields(operation.input),
            msgspec.structs.fields(operation.wire_input),
            strict=True,
        )
    }


@pytest.mark.parametrize("operation", BOTH, ids=lambda op: op.name)
def test_mcp_and_openapi_take_the_same_input(
    document: dict[str, Any], operation: Operation[Any, Any]
) -> None:
    """Each operation on both surfaces takes the same fields under the same names, the same
    ones required; body fields have the very same JSON schema (bounds, types, defaults)."""
    tool = TOOLS[operation.name].input_schema
    rest = openapi_input(document, operation)
    renamed = wire_names(operation)
    assert set(tool["properties"]) == {renamed[name] for name in rest["properties"]}
    assert operation.rest is not None
    path = {renamed[name] for name in operation.rest.path_fields}  # a path always gives them
    assert set(tool.get("required", [])) - path == {renamed[n] for n in rest["required"]} - path
    spec = openapi_operation(document, operation)
    if "requestBody" in spec:
        body = resolved(spec["requestBody"]["content"]["application/json"]["schema"], document)
        for name, schema in object_of(body)["properties"].items():
            assert tool["properties"][renamed[name]] == schema, name


@pytest.mark.parametrize("operation", BOTH, ids=lambda op: op.name)
def test_mcp_and_openapi_answer_the_same_shape(
    document: dict[str, Any], operation: Operation[Any, Any]
) -> None:
    """The tool's outputSchema and the route's success response list the same fields, the
    same ones required."""
    assert operation.rest is not None
    spec = openapi_operation(document, operation)
    answer = resolved(
        spec["responses"][str(operation.rest.status)]["content"]["application/json"]["schema"],
        document,
    )
    output = TOOLS[operation.name].output_schema
    assert output is not None
    assert set(output["properties"]) == set(answer["properties"])
    assert set(output.get("required", [])) == set(answer.get("required", []))


def test_every_declared_surface_is_built(app: Litestar) -> None:
    """Each operation appears on exactly the surfaces the table declares: its REST route
    with its method, its MCP tool, its agentmemory route."""
    routes = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, HTTPRoute)
        for method in route.methods
    }

    def served(method: str, path: str) -> bool:
        return (method, path.replace(":str}", "}").replace(":path}", "}")) in {
            (m, p.replace(":str}", "}").replace(":path}", "}")) for m, p in routes
        }

    for operation in OPERATIONS:
        if operation.rest is not None:
            assert served(operation.rest.method, operation.rest.path), operation.name
        if operation.agentmemory is not None:
            assert served(operation.agentmemory.method, operation.agentmemory.path), operation.name
        assert (operation.name in TOOLS) == operation.tool, operation.name
    assert len(TOOLS) == sum(op.tool for op in OPERATIONS)


def test_agentmemory_names_are_decided_by_the_table() -> None:
    """Tools named for agentmemory take camelCase arguments (agentmemory's own explicit
    names, such as token_budget, kept); Baton's tools take Baton's snake_case."""
    for operation in OPERATIONS:
        if not operation.tool:
            continue
        names = set(TOOLS[operation.name].input_schema["properties"])
        fields = {info.name for info in msgspec.structs.fields(operation.input)}
        if operation.naming == "baton":
            assert names == fields, operation.name
    assert {"agentId", "ttlDays"} <= set(TOOLS["memory_save"].input_schema["properties"])
    assert {"agentId", "token_budget"} <= set(TOOLS["memory_recall"].input_schema["properties"])
    assert {"memoryId", "observationIds"} <= set(TOOLS["memory_forget"].input_schema["properties"])


def test_the_client_builds_each_operations_own_input() -> None:
    """The Python client builds requests from the operation's input type: a parameter the
    operation does not take is refused before anything is sent, path fields are escaped
    into the path, a GET sends the rest as its query."""
    by_name = {operation.name: operation for operation in OPERATIONS}
    with pytest.raises(TypeError):
        request(by_name["remember"], ref="a/b", value=1, confidense=0.9)
    call = request(by_name["read_record"], ref="a b/../c", version=2)
    assert (call.method, call.path, call.params) == (
        "GET",
        "/v1/records/a%20b/%2E%2E/c",
        {"version": 2},
    )
    call = request(by_name["list_handoffs"], from_agent="scout")
    assert call.params["from"] == "scout" and "to" not in call.params
    call = request(by_name["remember"], ref="a/b", value=None)
    assert call.json is not None and call.json["value"] is None  # a required field is sent


def test_output_schemas_are_the_result_types() -> None:
    """A tool's outputSchema is msgspec's schema of the operation's declared result."""
    for operation in OPERATIONS:
        if operation.tool:
            assert TOOLS[operation.name].output_schema == schema_of(operation.result)


class EchoInput(msgspec.Struct, kw_only=True):
    text: str


async def echo(call: Any, i: EchoInput) -> list[str]:
    """Say it back.

    Maintainers' notes, not the description."""
    return [i.text]


async def undocumented(call: Any, i: EchoInput) -> str:
    return i.text


def test_an_entry_reads_its_name_words_and_types_from_the_core() -> None:
    """``Operation.of(core)`` names the operation after the core, describes it with the
    first paragraph of the core's docstring and takes its input and result types from the
    core's annotations; a core without a docstring is refused, naming it."""
    entry = Operation.of(echo, effect="reads")
    assert (entry.name, entry.description) == ("echo", "Say it back.")
    assert (entry.input, entry.result) == (EchoInput, list[str])
    assert Operation.of(echo, name="say", effect="reads").name == "say"
    with pytest.raises(TypeError, match="undocumented"):
        Operation.of(undocumented, effect="reads")


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda operation: operation.name)
def test_every_operation_has_an_example_its_input_takes(operation: Operation[Any, Any]) -> None:
    """Each entry carries an example request (shown in the OpenAPI document, sent by the
    security matrices) that its input decodes as Baton's REST routes and as its own wire
    (MCP, agentmemory's routes) spell it."""
    assert operation.example is not None
    for naming in ("baton", operation.naming):
        operation.decode(operation.example_in(naming), naming)  # InvalidInput if it does not


def test_the_openapi_document_shows_each_routes_example(document: dict[str, Any]) -> None:
    """A route's request body, or its query parameters, show the table's example."""
    for operation in OPERATIONS:
        spec = operation.rest
        if spec is None:
            continue
        described = document["paths"][spec.path.replace(":path", "").replace(":str", "")]
        described = described[spec.method.lower()]
        example = {
            name: value
            for name, value in operation.example_in("baton").items()
            if name not in spec.path_fields
        }
        if spec.method == "GET":
            shown = {
                parameter["name"]: parameter["schema"]["examples"][0]
                for parameter in described.get("parameters", [])
                if parameter["in"] == "query" and "examples" in parameter["schema"]
            }
        else:
            schema = described.get("requestBody", {}).get("content", {})
            shown = schema.get("application/json", {}).get("schema", {}).get("examples", [{}])[0]
        assert shown == example, operation.name
