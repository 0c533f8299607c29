"""Codex's trust in command hooks (Codex 0.171; docs: developers.openai.com/codex/hooks).

Codex runs a user's or project's hook only once the user trusted it: its ``config.toml``
holds ``[hooks.state."KEY"] trusted_hash = "sha256:…"``, where KEY names the hook by its
file, event and place in that file, and the hash covers what the hook runs. A hook whose
command, matcher or timeout changed no longer matches its hash and is skipped until trusted
again. ``baton setup codex`` writes the trust for the hooks it writes (the user asked for
them, as trusting them in Codex's ``/hooks`` would); ``baton doctor`` checks it.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

DEFAULT_SECONDS = 600  # a hook's timeout when its handler names none
# The events whose matcher is part of a hook's identity (Codex ignores the others' matcher).
MATCHED = frozenset(
    {
        "permission_request",
        "post_compact",
        "post_tool_use",
        "pre_compact",
        "pre_tool_use",
        "session_start",
    }
)


def label(event: str) -> str:
    """Codex's name of an event in trust keys and hashes: ``SessionStart`` → ``session_start``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()


def key(source: Path, event: str, group: int, handler: int = 0) -> str:
    """The trust key of the ``handler``-th hook of the ``group``-th group of ``event`` in the
    hooks file ``source`` (an absolute path)."""
    return f"{source}:{label(event)}:{group}:{handler}"


def digest(event: str, group: dict[str, Any], handler: int = 0) -> str:
    """The hash Codex trusts a command hook by: SHA-256 of its normalised identity (the
    event, the matcher where the event uses one, the command with its effective timeout) as
    compact JSON with sorted keys."""
    hook = group["hooks"][handler]
    name = label(event)
    identity: dict[str, Any] = {
        "event_name": name,
        "hooks": [
            {
                "type": "command",
                "command": hook["command"],
                "timeout": max(1, int(hook.get("timeout", DEFAULT_SECONDS))),
                "async": False,
            }
        ],
    }
    if group.get("matcher") is not None and name in MATCHED:
        identity["matcher"] = group["matcher"]
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def state(config: Any) -> dict[str, Any]:
    """The ``[hooks.state]`` table of a Codex ``config.toml`` read as data ({} when none)."""
    hooks = config.get("hooks") if isinstance(config, dict) else None
    found = hooks.get("state") if isinstance(hooks, dict) else None
    return found if isinstance(found, dict) else {}


def project_trusted(config: Any, project: Path) -> bool:
    """Whether the user's Codex configuration trusts ``project``, itself or through the git
    repository holding it: Codex reads a project's ``.codex`` folder only then."""
    projects = config.get("projects") if isinstance(config, dict) else None
    root = next(
        (folder for folder in (project, *project.parents) if (folder / ".git").exists()), None
    )
    return isinstance(projects, dict) and any(
        isinstance(entry := projects.get(str(folder)), dict)
        and entry.get("trust_level") == "trusted"
        for folder in {project, root or project}
    )


def untrusted_project(project: Path, user_config: Path) -> str:
    """What to do about a project Codex does not trust yet, in one line."""
    return (
        f"Codex reads {project / '.codex'} only in a trusted project: trust {project} when "
        f'Codex asks, or add trust_level = "trusted" under [projects."{project}"] in '
        f"{user_config}"
    )
