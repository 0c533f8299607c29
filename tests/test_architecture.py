"""The shape of the code base: rules a newcomer can rely on, checked from the source."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from importlib import resources
from pathlib import Path

import baton.server
from baton.server.model import keys as key_module
from baton.server.model.keys import Inbox, Keys, Thread

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "server": "baton.server",
    "queue": "baton.queue",
    "agents": "baton.agents",
    "demo": "baton.demo",
}


def modules() -> dict[str, Path]:
    """Every module of the installed package, by dotted name."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the Baton modules it imports, function-level imports and annotation-only
    ones under ``if TYPE_CHECKING:`` included: hiding a cycle in a function or behind a type
    checker's flag still makes one for whoever reads or changes the code."""
    known = modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            graph[name] |= {target for target in targets if target in known and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycles() -> None:
    """No two Baton modules import each other, directly or around a loop: layers stay
    layers (function-level and annotation-only imports count too; stores know their
    namespace by a protocol defined below them, not by the object that builds them)."""
    assert cycles(import_graph()) == []


# The floors of baton.server, lowest first (docs/architecture.md): a module imports modules of
# its own floor or of lower ones, never of a higher one.
FLOORS = (
    ("model",),
    ("runtime",),
    ("retrieval",),
    ("stores",),
    ("operation", "operations"),
    ("maintenance",),
    ("api", "mcp"),
    ("cli", "entry"),
)


def floor(module: str) -> int:
    """The floor of a module of ``baton.server`` (the package itself: the lowest)."""
    parts = module.split(".")
    if len(parts) == 2:
        return 0
    return next(number for number, names in enumerate(FLOORS) if parts[2] in names)


def test_no_module_of_the_server_imports_from_a_floor_above_its_own() -> None:
    """The server's folders are floors: the vocabulary, the runtime, search, the stores, the
    operation table, whole-namespace maintenance, the transports, the CLI. No store imports
    a transport or the table, no runtime module a store: an arrow up would be found here
    (every module of the server belongs to a floor, or ``floor`` fails)."""
    upward = [
        f"{source} -> {target}"
        for source, targets in import_graph().items()
        if source.startswith("baton.server")
        for target in targets
        if target.startswith("baton.server") and floor(target) > floor(source)
    ]
    assert upward == []


def test_no_two_modules_share_a_name() -> None:
    """A module name says which module it is: no ``handoffs.py`` in two folders."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for dotted in modules():
        if not dotted.endswith(tuple(FOLDERS.values())):
            by_name[dotted.rsplit(".", 1)[-1]].append(dotted)
    shared = {
        name: paths
        for name, paths in by_name.items()
        if len(paths) > 1 and name not in {"__main__"}
    }
    assert shared == {}


PLACEHOLDERS = {
    "namespace": "<ns>",
    "ref": "<ref>",
    "version": "<n>",
    "tag": "<tag>",
    "session_id": "<sid>",
    "agent": "<agent>",
    "packet_id": "<id>",
    "observation_id": "<oid>",
    "digest": "<sha256>",
    "seq": "<seq>",
    "sha": "<sha256>",
    "address": "<address>",
    "term": "<term>",
    "owner": "<owner>",
    "token_id": "<token id>",
}


def key_shapes() -> set[str]:
    """Every key shape keys.py can build, with placeholders for its arguments."""
    keys = Keys(PLACEHOLDERS["namespace"])
    shapes = set()
    for name in dir(Keys):
        if name.startswith("_"):
            continue
        member = getattr(Keys, name)
        if isinstance(member, property):
            shapes.add(getattr(keys, name))
        elif callable(member):
            params = member.__code__.co_varnames[1 : member.__code__.co_argcount]
            built = member(keys, *(PLACEHOLDERS[param] for param in params))
            if isinstance(built, Inbox):
                shapes |= inbox_shapes(built)
            elif isinstance(built, Thread):
                shapes |= {built.stem, *built.all}
            else:
                shapes.add(built)
    for name, value in vars(key_module).items():
        if name.isupper() and isinstance(value, str) and value.startswith(key_module.PREFIX + ":"):
            shapes.add(value)
        elif (
            callable(value)
            and getattr(value, "__module__", "") == key_module.__name__
            and name.endswith("_key")
        ):
            params = value.__code__.co_varnames[: value.__code__.co_argcount]
            shapes.add(value(*(PLACEHOLDERS[param] for param in params)))
    return shapes


def inbox_shapes(inbox: Inbox) -> set[str]:
    """Every key shape of one agent's inbox."""
    packet_id = PLACEHOLDERS["packet_id"]
    return {inbox.stem, inbox.packet(packet_id), inbox.log(packet_id), *inbox.sets}


def documented_shapes() -> set[str]:
    """The key shapes docs/data-model.md names in its tables' first column."""
    text = (ROOT / "docs" / "data-model.md").read_text()
    return set(re.findall(r"^\| `(baton:[^`]+)` \|", text, flags=re.MULTILINE))


def test_the_data_model_lists_exactly_the_keys_baton_builds() -> None:
    """docs/data-model.md names every Redis key shape keys.py builds, and no other."""
    built, documented = key_shapes(), documented_shapes()
    assert sorted(built - documented) == [], "built but not documented"
    assert sorted(documented - built) == [], "documented but never built"


# An f-string extending a key built elsewhere: f"{keys.session(sid)}:files", f"{PREFIX}:x".
KEY_FSTRING = re.compile(r"\{[^}]*\b(keys|Keys|PREFIX|base)\b[^}]*\}:")


def test_every_key_is_built_in_keys_py() -> None:
    """No module outside keys.py spells a Baton key: a key string literal starting with
    ``baton:`` (or an f-string building one) appears only there."""
    offenders = []
    for dotted, path in modules().items():
        if dotted == key_module.__name__:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.match(r"baton:[a-z{<]", node.value)
            ):
                offenders.append(f"{dotted}:{node.lineno}: {node.value!r}")
            elif isinstance(node, ast.JoinedStr) and KEY_FSTRING.search(ast.unparse(node)):
                offenders.append(f"{dotted}:{node.lineno}: {ast.unparse(node)}")
    assert offenders == []


def test_every_lua_script_is_a_file_with_its_keys_and_arguments_described() -> None:
    """Lua lives in server/lua/*.lua, each file opening with the KEYS and ARGV it takes."""
    scripts = [
        entry
        for entry in resources.files(baton.server).joinpath("lua").iterdir()
        if entry.name.endswith(".lua")
    ]
    assert scripts
    for script in scripts:
        header = script.read_text().split("\n\n", 1)[0]
        assert header.startswith("--"), script.name
        assert "KEYS" in header or "no keys" in header.lower(), script.name
        assert "ARGV" in header or "no arguments" in header.lower(), script.name
    for dotted, path in modules().items():
        assert "redis.call(" not in path.read_text(), f"Lua inside {dotted}"


def subclasses(cls: type) -> set[type]:
    return {sub for direct in cls.__subclasses__() for sub in {direct, *subclasses(direct)}}


def test_the_python_client_loads_only_what_it_speaks() -> None:
    """``from baton.agents import BatonClient`` in a fresh interpreter loads the wire types
    and the operation table, nothing of the server: no store module, no redis-py, no
    stemmer, no web framework, queue or MCP SDK."""
    import baton.server.stores.backend  # noqa: F401  (every store, for their modules below)
    from baton.server.stores.store_base import NamespaceStore

    code = "import sys; from baton.agents import BatonClient; print(*sorted(sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(done.stdout.split())
    stores = {store.__module__ for store in subclasses(NamespaceStore)}
    assert "baton.server.stores.records" in stores and "baton.server.stores.memories" in stores
    assert "baton.agents.client" in loaded
    assert loaded & stores == set()
    heavy = {"redis", "Stemmer", "litestar", "rq", "mcp", "structlog", "msgpack"}
    assert loaded & heavy == set()


def test_every_name_baton_agents_offers_resolves() -> None:
    """``from baton.agents import X`` works for each name it lists (loaded on first use):
    the client, its errors, the ``@agent`` registry and ``Resumed``, what a handler gets."""
    import baton.agents

    for name in baton.agents.__all__:
        assert getattr(baton.agents, name).__name__ == name
