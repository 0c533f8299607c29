"""Gemini CLI's hooks as ``baton setup gemini`` writes them, fired with the payloads Gemini
CLI 0.61 sends (its hook system's base input: session_id, transcript_path, cwd,
hook_event_name, timestamp, and each event's fields, read from its bundle) against a real
Baton: a session is recorded under the agent setup named, and the next one starts with
"where were we" as the additionalContext Gemini CLI adds to its history."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import set_up_in


def test_a_gemini_session_is_recorded_and_the_next_starts_where_it_left_off(
    api_url: str, tmp_path: Path
) -> None:
    """Start, prompt, an edit (Gemini's `replace` tool), the agent's answer and the end of
    session g-1 land in Baton as agent gemini; session g-2's SessionStart hook answers
    g-1 and the file it edited as additionalContext."""
    project = tmp_path / "shop"
    (project / "src").mkdir(parents=True)
    set_up_in("gemini", project, tmp_path, api_url)
    hooks = json.loads((project / ".gemini" / "settings.json").read_text())["hooks"]
    quiet = {k: v for k, v in os.environ.items() if not k.startswith(("BATON_", "AGENT_ID"))}

    def fire(event: str, session: str, **fields: Any) -> subprocess.CompletedProcess[str]:
        [group] = hooks[event]
        payload = {
            "session_id": session,
            "transcript_path": "",
            "cwd": str(project),
            "hook_event_name": event,
            "timestamp": "2026-12-07T10:00:00.000Z",
            **fields,
        }
        done = subprocess.run(
            group["hooks"][0]["command"],
            shell=True,  # as Gemini CLI runs a command hook
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=project,
            env={**quiet, "HOME": str(tmp_path)},
        )
        assert (done.returncode, done.stderr) == (0, ""), (event, done)
        return done

    fire("SessionStart", "g-1", source="startup")
    fire("BeforeAgent", "g-1", prompt="let the checkout page accept coupons")
    edit = {"file_path": str(project / "src" / "checkout.ts"), "old_string": "a", "new_string": "b"}
    fire(
        "AfterTool", "g-1", tool_name="replace", tool_input=edit, tool_response={"llmContent": "ok"}
    )
    fire("AfterAgent", "g-1", prompt="", prompt_response="Coupons work.", stop_hook_active=False)
    fire("SessionEnd", "g-1", reason="exit")

    started = fire("SessionStart", "g-2", source="startup")
    context = json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "g-1" in context and "src/checkout.ts" in context
    with httpx.Client(base_url=api_url, timeout=10) as http:
        first = http.get("/v1/sessions/g-1").json()
    assert (first["agent"], first["project"], first["status"]) == ("gemini", "shop", "completed")
    assert first["files"] == [str(project / "src" / "checkout.ts")]
