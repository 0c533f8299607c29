"""Baton's OpenCode plugin, as ``baton setup opencode`` writes it, run under Node with the
hooks and events OpenCode calls it with (``tests/hosts/opencode_plugin_driver.mjs``) against
a real Baton: a session's prompt and tool calls are recorded, its end is recorded, and the
next session in the folder starts with "where were we" in its system prompt."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx

from tests.conftest import REPO, set_up_in

DRIVER = REPO / "tests" / "hosts" / "opencode_plugin_driver.mjs"


def test_an_opencode_session_is_recorded_and_resumed_in_the_next(
    api_url: str, redis_url: str, tmp_path: Path
) -> None:
    """Two OpenCode sessions in one folder: the first's prompt and edit land in Baton under
    the agent setup named, the session ends when OpenCode deletes it, and the second's
    system prompt carries the first's "where were we" (the session and the file it edited)."""
    folder = tmp_path / "shop"
    folder.mkdir()
    set_up_in("opencode", folder, tmp_path, api_url)
    plugin = folder / ".opencode" / "plugins" / "baton.js"
    ran = subprocess.run(
        ["node", str(DRIVER), str(plugin), str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert ran.returncode == 0, ran.stderr
    system = json.loads(ran.stdout)

    with httpx.Client(base_url=api_url, timeout=10) as http:
        first = http.get("/v1/sessions/oc-1").json()
        assert (first["agent"], first["project"], first["status"]) == (
            "opencode",
            "shop",
            "completed",
        )
        assert first["files"] == [str(folder / "src" / "login.ts")]
        assert first["observation_count"] == 3  # the prompt, the edit, the idle stop
    assert system[0] == "You are OpenCode."
    assert len(system) == 2
    assert system[1].startswith('<agentmemory-context project="shop">')
    assert 'Resuming oc-1 "session oc-1"' in system[1] and "src/login.ts" in system[1]
