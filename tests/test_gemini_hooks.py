"""Gemini CLI's hooks as ``baton setup gemini`` writes them, fired with the payloads Gemini
CLI 0.61 sends (its hook system's base input: session_id, transcript_path, cwd,
hook_event_name, timestamp, and each event's fields, read from its bundle) against a real
Baton: a session is recorded under the agent setup named, and the next one starts with
"where were we" as the additionalContext Gemini CLI adds to its history."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import assert_resumed, fire_hook, shop_with_hooks


def test_a_gemini_session_is_recorded_and_the_next_starts_where_it_left_off(
    api_url: str, tmp_path: Path
) -> None:
    """Start, prompt, an edit (Gemini's `replace` tool), the agent's answer and the end of
    session g-1 land in Baton as agent gemini; session g-2's SessionStart hook answers
    g-1 and the file it edited as additionalContext."""
    project, hooks = shop_with_hooks("gemini", tmp_path, api_url, ".gemini/settings.json")

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
        command = ["/bin/sh", "-c", group["hooks"][0]["command"]]  # as Gemini CLI runs it
        return fire_hook(command, payload, project, tmp_path)

    fire("SessionStart", "g-1", source="startup")
    fire("BeforeAgent", "g-1", prompt="let the checkout page accept coupons")
    edit = {"file_path": str(project / "src" / "checkout.ts"), "old_string": "a", "new_string": "b"}
    fire(
        "AfterTool", "g-1", tool_name="replace", tool_input=edit, tool_response={"llmContent": "ok"}
    )
    fire("AfterAgent", "g-1", prompt="", prompt_response="Coupons work.", stop_hook_active=False)
    fire("SessionEnd", "g-1", reason="exit")

    started = fire("SessionStart", "g-2", source="startup")
    assert_resumed(started, api_url, "g-1", "gemini", [project / "src" / "checkout.ts"])
