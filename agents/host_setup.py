"""``baton setup HOST``: write what an agent host needs to use Baton.

Every host gets Baton's MCP server entry in its own file and shape (:data:`MCP_FILES`;
Codex's is TOML, edited with tomlkit so the user's comments and order stay). Claude Code
also gets the hooks (``baton hook EVENT``), the skills (``handoff``, ``recap``,
``session-history``, ``recall``, each user-invocable as ``/name``) and the ``/remember``
command; OpenCode the same skills and the ``/remember`` and ``/recall`` commands (its skills
are not slash commands) and a plugin recording its sessions; Gemini CLI and Codex the hooks
(Codex's with the user's trust in them, which it needs to run any). With ``project`` the
files go into that project where the host reads project files, else into the user's own
configuration. Running it again changes
nothing; ``--dry-run`` shows the diff. Files are merged: only Baton's entries are added or
replaced; a file that is not valid JSON or TOML, not UTF-8, or not shaped as the host reads
it is refused, never overwritten.

User files are handled with care: a path that leads out of the folder setup writes into
(the project, or the home directory) through a symlink is refused (a link that stays inside,
as dotfile managers make, is followed and stays a link); every file is written to a
temporary file beside it first and renamed over the original only once all of them are
written, so a full disk or any other error leaves every original as it was.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import secrets
import shlex
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

import tomlkit
import tomlkit.exceptions
import tomlkit.items

from baton.agents import codex_trust
from baton.agents.hook import CLAUDE_EVENTS
from baton.server.model.endpoint import base_url_of
from baton.server.model.errors import BatonError, InvalidInput

Host = Literal[
    "claude-code", "opencode", "gemini", "codex", "cursor", "claude-desktop", "vscode", "cline"
]
HOSTS: tuple[Host, ...] = get_args(Host)
SERVER = "baton"  # the MCP server's name in the hosts' configurations
SKILLS = ("handoff", "recap", "session-history", "recall")
COMMANDS: dict[Host, tuple[str, ...]] = {
    "claude-code": ("remember",),  # the recall skill is /recall already
    "opencode": ("remember", "recall"),
}
# The AGENT_ID each host's MCP server acts as, unless --agent says otherwise.
DEFAULT_AGENTS: dict[Host, str] = {
    host: "claude" if host == "claude-code" else host for host in HOSTS
}
# The host's events Baton records: host event -> (the Claude Code event `baton hook` is
# told, the tools it is limited to; None: all). Gemini CLI's hooks take Claude Code's
# payloads and answers under its own names: the events and tool names are those of its own
# `gemini hooks migrate --from-claude` (0.61), which has no PostToolUseFailure.
HOOKED: dict[Host, dict[str, tuple[str, str | None]]] = {
    "claude-code": {
        "SessionStart": ("SessionStart", None),
        "UserPromptSubmit": ("UserPromptSubmit", None),
        "PreToolUse": ("PreToolUse", "Edit|Write|Read|Glob|Grep"),
        "PostToolUse": ("PostToolUse", "*"),
        "PostToolUseFailure": ("PostToolUseFailure", "*"),
        "PreCompact": ("PreCompact", None),
        "Stop": ("Stop", None),
        "SessionEnd": ("SessionEnd", None),
    },
    "gemini": {
        "SessionStart": ("SessionStart", None),
        "BeforeAgent": ("UserPromptSubmit", None),
        "BeforeTool": ("PreToolUse", "replace|write_file|read_file|glob|grep"),
        "AfterTool": ("PostToolUse", "*"),
        "PreCompress": ("PreCompact", None),
        "AfterAgent": ("Stop", None),
        "SessionEnd": ("SessionEnd", None),
    },
    # Codex (0.171) sends Claude Code's payloads with a few more fields; its PreToolUse and
    # PreCompact ignore plain-text answers, and SessionStart (source "compact") carries the
    # context after a compaction instead.
    "codex": {
        "SessionStart": ("SessionStart", None),
        "UserPromptSubmit": ("UserPromptSubmit", None),
        "PostToolUse": ("PostToolUse", "*"),
        "Stop": ("Stop", None),
        "SessionEnd": ("SessionEnd", None),
    },
}
# Seconds a host gives each of Baton's hooks, where its default does not suit them: Codex
# waits 600 s by default, but gives SessionEnd 1 s unless told (3 s at most).
HOOK_SECONDS: dict[Host, dict[str, int]] = {
    "codex": {
        "SessionStart": 30,
        "UserPromptSubmit": 30,
        "PostToolUse": 30,
        "Stop": 30,
        "SessionEnd": 3,
    },
}
assert all(told in CLAUDE_EVENTS for events in HOOKED.values() for told, _ in events.values())


class NotWritten(BatonError):
    """A file setup could not write (a full disk, no permission): nothing was changed."""


@dataclass(frozen=True)
class Change:
    """One file as it is and as setup writes it: ``path`` as the host names it, ``target``
    the file written (``path`` with its symlinks followed, inside the folder setup writes
    into)."""

    path: Path
    target: Path
    before: str | None
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                (self.before or "").splitlines(keepends=True),
                self.after.splitlines(keepends=True),
                fromfile=str(self.path) if self.before is not None else "/dev/null",
                tofile=str(self.path),
            )
        )


@dataclass(frozen=True)
class McpFile:
    """Where a host keeps its MCP servers and how it spells Baton's: ``user`` and
    ``project`` (None: the host has no project file) give the file from the home or project
    folder, ``keys`` lead to the entry in it, ``entry`` makes the entry from the command and
    its environment. Shapes as each host's own code or documentation reads them (versions:
    docs/mcp.md)."""

    user: Callable[[Path], Path]
    project: Callable[[Path], Path] | None
    keys: tuple[str, ...]
    entry: Callable[[str, dict[str, str]], dict[str, Any]]


def _app_data(home: Path) -> Path:
    """Where desktop applications keep their settings in this user's home."""
    if sys.platform == "darwin":
        return home / "Library" / "Application Support"
    if sys.platform == "win32":
        return home / "AppData" / "Roaming"
    return home / ".config"


def _codex_home(home: Path) -> Path:
    """Where Codex keeps this user's settings: ``CODEX_HOME``, else ``~/.codex``."""
    return Path(os.environ["CODEX_HOME"]) if os.environ.get("CODEX_HOME") else home / ".codex"


def _in_home_and_project(
    *parts: str,
) -> tuple[Callable[[Path], Path], Callable[[Path], Path]]:
    """The same path in the home folder (user) and in a project."""
    return (lambda home: home.joinpath(*parts)), (lambda project: project.joinpath(*parts))


def _stdio(baton: str, env: dict[str, str]) -> dict[str, Any]:
    return {"command": baton, "args": ["mcp"], "env": env}


def _typed_stdio(baton: str, env: dict[str, str]) -> dict[str, Any]:
    return {"type": "stdio", **_stdio(baton, env)}


MCP_FILES: dict[Host, McpFile] = {
    "claude-code": McpFile(
        lambda home: home / ".claude.json",
        lambda project: project / ".mcp.json",
        ("mcpServers", SERVER),
        _stdio,
    ),
    "opencode": McpFile(
        lambda home: home / ".config" / "opencode" / "opencode.json",
        lambda project: project / "opencode.json",
        ("mcp", SERVER),
        lambda baton, env: {
            "type": "local",
            "command": [baton, "mcp"],
            "environment": env,
            "enabled": True,
        },
    ),
    "gemini": McpFile(
        *_in_home_and_project(".gemini", "settings.json"),
        ("mcpServers", SERVER),
        _stdio,
    ),
    "codex": McpFile(
        lambda home: _codex_home(home) / "config.toml",
        lambda project: project / ".codex" / "config.toml",
        ("mcp_servers", SERVER),
        _stdio,
    ),
    "cursor": McpFile(
        *_in_home_and_project(".cursor", "mcp.json"),
        ("mcpServers", SERVER),
        _typed_stdio,
    ),
    "claude-desktop": McpFile(
        lambda home: _app_data(home) / "Claude" / "claude_desktop_config.json",
        None,
        ("mcpServers", SERVER),
        _stdio,
    ),
    "vscode": McpFile(
        lambda home: _app_data(home) / "Code" / "User" / "mcp.json",
        lambda project: project / ".vscode" / "mcp.json",
        ("servers", SERVER),
        _typed_stdio,
    ),
    "cline": McpFile(
        lambda home: home / ".cline" / "data" / "settings" / "cline_mcp_settings.json",
        None,
        ("mcpServers", SERVER),
        lambda baton, env: {**_typed_stdio(baton, env), "disabled": False, "autoApprove": []},
    ),
}


def mcp_config(host: Host, home: Path, project: Path | None) -> tuple[Path, list[str]]:
    """The file holding ``host``'s MCP server entry for Baton, and the keys leading to it;
    ``InvalidInput`` for a project when the host has no project file."""
    files = MCP_FILES[host]
    if project is None:
        return files.user(home), list(files.keys)
    if files.project is None:
        raise InvalidInput(
            "project", f"{host} has no project configuration: set it up without --project"
        )
    return files.project(project), list(files.keys)


def gets(host: Host) -> str:
    """What ``baton setup host`` writes for it, in words."""
    if host == "claude-code":
        return "MCP server, hooks (sessions recorded), skills, /remember"
    if host == "opencode":
        return "MCP server, plugin (sessions recorded), skills, /remember and /recall"
    if host in ("gemini", "codex"):
        return "MCP server, hooks (sessions recorded)"
    return "MCP server"


def describe(home: Path, project: Path) -> list[str]:
    """``baton setup --list``: each host, what it gets, and where it is set up (this
    project, the user's configuration, or not yet)."""
    lines = []
    for host in HOSTS:
        places = []
        if MCP_FILES[host].project is not None:
            path, keys = mcp_config(host, home, project)
            places += [f"project ({path})"] if _configured(path, keys) else []
        path, keys = mcp_config(host, home, None)
        places += [f"user ({path})"] if _configured(path, keys) else []
        where = ", ".join(places) or f"not set up: baton setup {host}"
        lines.append(f"{host:<15} {gets(host)}; {where}")
    return lines


def _configured(path: Path, keys: list[str]) -> bool:
    node = read_config(path)
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return isinstance(node, dict)


# What setup carries from the environment it runs in into what the host runs, so the host
# reaches the same Baton from any shell: the MCP server's store, and the hooks' server.
STORE_VARIABLES = ("BATON_REDIS_URL", "BATON_DATA_DIR", "BATON_NAMESPACE")
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)  # NAME=value before a command
HOOK_VARIABLES = ("BATON_URL", "BATON_HOST", "BATON_PORT", "BATON_TOKEN_FILE")


def plan(
    host: Host,
    *,
    baton: str,
    agent: str,
    home: Path,
    project: Path | None = None,
    environ: dict[str, str] | None = None,
) -> list[Change]:
    """What setting ``host`` up writes: ``baton`` is the command to run (an absolute path
    works without PATH), ``agent`` the AGENT_ID the MCP server acts as; ``environ`` the
    environment setup runs in, whose Baton settings the host is given (``STORE_VARIABLES``
    to the MCP server, ``HOOK_VARIABLES`` to the hooks; never a token itself)."""
    environ = environ or {}
    store = {name: environ[name] for name in STORE_VARIABLES if environ.get(name)}
    reach = {name: environ[name] for name in HOOK_VARIABLES if environ.get(name)}
    base = project if project is not None else home
    config, keys = mcp_config(host, home, project)
    entry = MCP_FILES[host].entry(baton, {"AGENT_ID": agent, **store})
    if host == "codex":
        return _codex(config, keys, entry, home, base, baton, {"AGENT_ID": agent, **reach})
    changes = [_json(config, base, keys, entry)]
    if host == "claude-code":
        changes.append(_hooks(base / ".claude" / "settings.json", base, baton, reach, host))
        folder = base / ".claude"
    elif host == "gemini":  # its hooks live in the file holding its MCP server
        attributed = {"AGENT_ID": agent, **reach}  # `baton hook` would say claude-code
        return [_hooks(config, base, baton, attributed, host, changes[0])]
    elif host == "opencode":
        folder = project / ".opencode" if project is not None else config.parent
        plugin = _opencode_plugin(agent, reach)
        changes.append(_text(folder / "plugins" / "baton.js", base, plugin))
    else:
        return changes  # the MCP server only (docs/mcp.md: what each host gets)
    changes += [
        _text(folder / "skills" / name / "SKILL.md", base, _template(f"{name}.skill.md"))
        for name in SKILLS
    ]
    changes += [
        _text(folder / "commands" / f"{name}.md", base, _template(f"{name}.command.md"))
        for name in COMMANDS[host]
    ]
    return changes


def _codex(
    config: Path,
    keys: list[str],
    entry: dict[str, Any],
    home: Path,
    base: Path,
    baton: str,
    reach: dict[str, str],
) -> list[Change]:
    """Codex's MCP server in ``config``, its hooks in the ``hooks.json`` beside it, and the
    user's trust in those hooks (Codex runs no hook the user's ``config.toml`` does not
    trust, by hash) in the user's own ``config.toml``, where Codex reads trust from."""
    hooks = _hooks(config.with_name("hooks.json"), base, baton, reach, "codex")
    written = json.loads(hooks.after)["hooks"]
    user_config = MCP_FILES["codex"].user(home)
    state = codex_trust.state(read_config(user_config))
    trust: list[Setting] = []
    for event in HOOKED["codex"]:
        for index, group in enumerate(written[event]):
            if baton_group(group, event):
                key = codex_trust.key(hooks.path, event, index)
                kept = state.get(key)  # the user's other settings of it (enabled) stay
                value = {**(kept if isinstance(kept, dict) else {})}
                value["trusted_hash"] = codex_trust.digest(event, group)
                trust.append((["hooks", "state", key], value))
    if user_config == config:
        return [_toml(config, base, [(keys, entry), *trust]), hooks]
    return [_toml(config, base, [(keys, entry)]), hooks, _toml(user_config, home, trust)]


def apply(changes: list[Change]) -> None:
    """Write the files that change: each to a temporary file beside it, then, once all are
    written, each renamed over its original (its permissions kept). A failure before the
    renames removes the temporary files and changes nothing."""
    written: list[tuple[Path, Path]] = []
    made: list[Path] = []  # folders made for new files, outermost first
    try:
        for change in changes:
            if change.changed:
                missing = [f for f in (change.target, *change.target.parents) if not f.exists()]
                made += reversed(missing[1:])
                change.target.parent.mkdir(parents=True, exist_ok=True)
                written.append((_written_beside(change), change.target))
    except OSError as error:
        for temporary, _ in written:
            temporary.unlink(missing_ok=True)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        where = error.filename or "a file"
        raise NotWritten(
            f"could not write {where}: {error.strerror or error}; nothing was changed"
        ) from None
    for temporary, target in written:
        os.replace(temporary, target)


def _written_beside(change: Change) -> Path:
    """``change.after`` in a new file in its target's folder, on disk."""
    temporary = change.target.with_name(f".{change.target.name}.{secrets.token_hex(4)}.baton")
    try:
        with open(temporary, "x", encoding="utf-8") as out:
            out.write(change.after)
            out.flush()
            os.fsync(out.fileno())
        if change.before is not None:
            os.chmod(temporary, change.target.stat().st_mode & 0o7777)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
    return temporary


def _opencode_plugin(agent: str, reach: dict[str, str]) -> str:
    """Baton's OpenCode plugin (sessions recorded, "where were we" at their start), told
    where setup found Baton: its URL, the token file, the agent it attributes to."""
    setup = {"url": base_url_of(reach), "tokenFile": reach.get("BATON_TOKEN_FILE"), "agent": agent}
    return _template("baton.opencode.js").replace("__BATON_SETUP__", json.dumps(setup))


def _template(name: str) -> str:
    return resources.files("baton.agents.integrations").joinpath(name).read_text()


def _inside(path: Path, root: Path) -> Path:
    """``path`` with its symlinks followed, refused when that leads out of ``root``."""
    try:
        target = path.resolve()
    except (RuntimeError, OSError) as error:  # a symlink loop
        raise InvalidInput("config", f"cannot follow {path}: {error}") from None
    if not target.is_relative_to(root.resolve()):
        raise InvalidInput(
            "config", f"{path} leads to {target}, outside {root} (a symlink); not following it"
        )
    return target


def _read(path: Path, target: Path) -> str | None:
    try:
        return target.read_text(encoding="utf-8") if target.exists() else None
    except UnicodeDecodeError:
        raise InvalidInput("config", f"{path} is not UTF-8 text; fix it first") from None
    except OSError as error:
        raise InvalidInput("config", f"cannot read {path}: {error.strerror}") from None


def _text(path: Path, root: Path, content: str) -> Change:
    target = _inside(path, root)
    return Change(path, target, _read(path, target), content)


def _load(path: Path, before: str | None) -> dict[str, Any]:
    if not before or not before.strip():
        return {}
    try:
        loaded = json.loads(before)
    except json.JSONDecodeError as error:
        raise InvalidInput("config", f"{path} is not valid JSON ({error}); fix it first") from None
    if not isinstance(loaded, dict):
        raise InvalidInput("config", f"{path} holds no JSON object; fix it first")
    return loaded


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


def _json(path: Path, root: Path, keys: list[str], value: Any) -> Change:
    """``path`` with ``value`` set under ``keys``, the rest of the file kept."""
    target = _inside(path, root)
    before = _read(path, target)
    data = _load(path, before)
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise InvalidInput("config", f"{path}: {key} is not an object; fix it first")
    node[keys[-1]] = value
    return Change(path, target, before, _dump(data))


Setting = tuple[list[str], dict[str, Any]]  # a table's value, and the keys leading to it


def _toml(path: Path, root: Path, settings: list[Setting]) -> Change:
    """A TOML file (Codex's) with each setting's value as the table under its keys, the
    rest of the file kept as it was written, comments and order included (tomlkit). The
    result is read back: a file whose other settings would move or change (tables written
    inline or as dotted keys, where tomlkit cannot add a table without taking what follows
    into it) is refused, left as it was."""
    target = _inside(path, root)
    before = _read(path, target)
    try:
        document = tomlkit.parse(before or "")
    except tomlkit.exceptions.ParseError as error:
        raise InvalidInput("config", f"{path} is not valid TOML ({error}); fix it first") from None
    expected = tomllib.loads(before or "")
    for keys, value in settings:
        parent = ".".join(keys[:-1])
        unusable = InvalidInput(
            "config",
            f"{path}: {parent} is written inline or as dotted keys, where Baton's table "
            f"cannot be added without moving your settings; write it as [{parent}.NAME] "
            f"tables (as Codex itself does), then run setup again",
        )
        try:
            node: Any = document
            for key in keys[:-1]:
                if key not in node:
                    node[key] = tomlkit.table(is_super_table=True)
                node = node[key]
                if not isinstance(node, dict):
                    raise InvalidInput("config", f"{path}: {key} is not a table; fix it first")
            current = node.get(keys[-1])
            if not (
                isinstance(current, tomlkit.items.Item) and current.unwrap() == value
            ):  # as it is: kept
                node[keys[-1]] = _table(value)
            after = tomlkit.dumps(document)
        except ValueError:  # tomlkit: an inline table cannot hold a table
            raise unusable from None
        node = expected
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
        if tomllib.loads(after) != expected:
            raise unusable
    return Change(path, target, before, tomlkit.dumps(document))


def _table(value: dict[str, Any]) -> Any:
    """``value`` as a TOML table, its dictionaries as tables of their own."""
    table = tomlkit.table()
    for name, item in value.items():
        table[name] = _table(item) if isinstance(item, dict) else item
    return table


def read_config(path: Path) -> Any:
    """A host's configuration file as data (JSON, or TOML by its suffix); None when it is
    missing or cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
        return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _hooks(
    path: Path,
    root: Path,
    baton: str,
    reach: dict[str, str],
    host: Host,
    written: Change | None = None,
) -> Change:
    """``host``'s settings with Baton's hooks (:data:`HOOKED`), each run with ``reach`` (the
    variables naming the server) before it: earlier Baton entries (any command ending in
    ``hook <Event>`` run by a ``baton``) replaced, everyone else's kept as they are. With
    ``written``, the hooks go into what that change of the same file writes."""
    target = _inside(path, root)
    before = _read(path, target)
    data = _load(path, before if written is None else written.after)
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InvalidInput("config", f"{path}: hooks is not an object; fix it first")
    for event, (told, matcher) in HOOKED[host].items():
        groups = hooks.get(event, [])
        if not isinstance(groups, list):
            raise InvalidInput(
                "config", f"{path}: hooks.{event} is not a list of hook groups; fix it first"
            )
        assignments = [f"{name}={shlex.quote(value)}" for name, value in reach.items()]
        command = " ".join([*assignments, shlex.quote(baton), "hook", told])
        handler: dict[str, Any] = {"type": "command", "command": command}
        if event in HOOK_SECONDS.get(host, {}):
            handler["timeout"] = HOOK_SECONDS[host][event]
        group: dict[str, Any] = {"hooks": [handler]}
        if matcher is not None:
            group = {"matcher": matcher, **group}
        hooks[event] = _in_place(groups, group, told)
    return Change(path, target, before, _dump(data))


def _in_place(groups: list[Any], group: Any, told: str) -> list[Any]:
    """``groups`` with Baton's ``group`` where Baton's first was (any other of Baton's for
    ``told`` dropped), or after them all: everyone else's groups keep their places (Codex
    trusts a hook by its place)."""
    ours = [baton_group(each, told) for each in groups]
    at = ours.index(True) if True in ours else len(groups)
    kept = [each for each, mine in zip(groups, ours, strict=True) if not mine]
    return [*kept[:at], group, *kept[at:]]


def baton_group(group: Any, event: str) -> bool:
    """Whether a hook group is one Baton's setup wrote (its one command is ``… hook
    <event>`` run by an executable named ``baton``)."""
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        return False
    commands = [h.get("command", "") for h in group["hooks"] if isinstance(h, dict)]
    return len(commands) == 1 and _is_baton_hook(commands[0], event)


def _is_baton_hook(command: str, event: str) -> bool:
    """``[NAME=value ...] …/baton hook <event>``."""
    words = command_words(command)
    return len(words) == 3 and Path(words[0]).name == "baton" and words[1:] == ["hook", event]


def command_words(command: str) -> list[str]:
    """A hook command's words, less the variables it sets before its program (none for a
    command the shell could not split)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    while words and ASSIGNMENT.fullmatch(words[0]):
        words.pop(0)
    return words
