"""``baton setup claude-code|opencode``: write what an agent host needs to use Baton.

Claude Code gets the MCP server entry, the hooks (``baton hook EVENT``), the skills
(``handoff``, ``recap``, ``session-history``, ``recall``, each user-invocable as ``/name``)
and the ``/remember`` command. OpenCode gets the MCP server entry, the same skills and the
``/remember`` and ``/recall`` commands (its skills are not slash commands); OpenCode has no
command hooks, so its sessions are not recorded. With ``project`` the files go into that
project (``.mcp.json``, ``.claude/``, ``opencode.json``, ``.opencode/``), else into the
user's own configuration. Running it again changes nothing; ``--dry-run`` shows the diff.
JSON files are merged: only Baton's entries are added or replaced; a file that is not
valid JSON is refused, never overwritten.
"""

from __future__ import annotations

import difflib
import json
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from baton.agents.hook import CLAUDE_EVENTS
from baton.server.errors import InvalidInput

Host = Literal["claude-code", "opencode"]
HOSTS: tuple[Host, ...] = ("claude-code", "opencode")
DEFAULT_AGENTS: dict[Host, str] = {"claude-code": "claude", "opencode": "opencode"}
SERVER = "baton"  # the MCP server's name in the hosts' configurations
SKILLS = ("handoff", "recap", "session-history", "recall")
COMMANDS: dict[Host, tuple[str, ...]] = {
    "claude-code": ("remember",),  # the recall skill is /recall already
    "opencode": ("remember", "recall"),
}
# Claude Code's events Baton records, with the tools they are limited to (None: all).
HOOKED: dict[str, str | None] = {
    "SessionStart": None,
    "UserPromptSubmit": None,
    "PreToolUse": "Edit|Write|Read|Glob|Grep",
    "PostToolUse": "*",
    "PostToolUseFailure": "*",
    "PreCompact": None,
    "Stop": None,
    "SessionEnd": None,
}
assert set(HOOKED) <= set(CLAUDE_EVENTS)


@dataclass(frozen=True)
class Change:
    """One file as it is and as setup writes it."""

    path: Path
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


def mcp_config(host: Host, home: Path, project: Path | None) -> tuple[Path, list[str]]:
    """The file holding ``host``'s MCP server entry for Baton, and the keys leading to it."""
    if host == "claude-code":
        path = project / ".mcp.json" if project is not None else home / ".claude.json"
        return path, ["mcpServers", SERVER]
    folder = project if project is not None else home / ".config" / "opencode"
    return folder / "opencode.json", ["mcp", SERVER]


def plan(
    host: Host, *, baton: str, agent: str, home: Path, project: Path | None = None
) -> list[Change]:
    """What setting ``host`` up writes: ``baton`` is the command to run (an absolute path
    works without PATH), ``agent`` the AGENT_ID the MCP server acts as."""
    base = project if project is not None else home
    config, keys = mcp_config(host, home, project)
    if host == "claude-code":
        entry: dict[str, Any] = {"command": baton, "args": ["mcp"], "env": {"AGENT_ID": agent}}
        changes = [_json(config, keys, entry), _hooks(base / ".claude" / "settings.json", baton)]
        folder = base / ".claude"
    else:
        entry = {
            "type": "local",
            "command": [baton, "mcp"],
            "environment": {"AGENT_ID": agent},
            "enabled": True,
        }
        changes = [_json(config, keys, entry)]
        folder = project / ".opencode" if project is not None else config.parent
    changes += [
        _text(folder / "skills" / name / "SKILL.md", _template(f"{name}.skill.md"))
        for name in SKILLS
    ]
    changes += [
        _text(folder / "commands" / f"{name}.md", _template(f"{name}.command.md"))
        for name in COMMANDS[host]
    ]
    return changes


def apply(changes: list[Change]) -> None:
    """Write the files that change."""
    for change in changes:
        if change.changed:
            change.path.parent.mkdir(parents=True, exist_ok=True)
            change.path.write_text(change.after)


def _template(name: str) -> str:
    return resources.files("baton.agents.integrations").joinpath(name).read_text()


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def _text(path: Path, content: str) -> Change:
    return Change(path, _read(path), content)


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


def _json(path: Path, keys: list[str], value: Any) -> Change:
    """``path`` with ``value`` set under ``keys``, the rest of the file kept."""
    before = _read(path)
    data = _load(path, before)
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise InvalidInput("config", f"{path}: {key} is not an object; fix it first")
    node[keys[-1]] = value
    return Change(path, before, _dump(data))


def _hooks(path: Path, baton: str) -> Change:
    """Claude Code's settings with Baton's hooks: earlier Baton entries (any command ending
    in ``hook <Event>`` run by a ``baton``) replaced, everyone else's kept."""
    before = _read(path)
    data = _load(path, before)
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InvalidInput("config", f"{path}: hooks is not an object; fix it first")
    for event, matcher in HOOKED.items():
        command = f"{shlex.quote(baton)} hook {event}"
        kept = [group for group in hooks.get(event, []) if not _ours(group, event)]
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": command}]}
        if matcher is not None:
            group = {"matcher": matcher, **group}
        hooks[event] = [*kept, group]
    return Change(path, before, _dump(data))


def _ours(group: Any, event: str) -> bool:
    """Whether a hook group is one Baton's setup wrote (its one command is ``… hook
    <event>`` run by an executable named ``baton``)."""
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        return False
    commands = [h.get("command", "") for h in group["hooks"] if isinstance(h, dict)]
    return len(commands) == 1 and _is_baton_hook(commands[0], event)


def _is_baton_hook(command: str, event: str) -> bool:
    program, _, rest = command.rpartition(f" hook {event}")
    return rest == "" and Path(program.strip("'\"")).name == "baton"
