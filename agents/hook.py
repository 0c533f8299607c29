"""``baton hook EVENT``: turn a Claude Code hook payload (JSON on stdin) into a Baton
observation, so Baton can be wired into Claude Code's hooks without other software.

A hook must never get in the agent's way: network errors and refused tokens are reported
on stderr in one line and the command still exits 0. ``BATON_TOKEN`` is sent as a bearer
token; with a token the hook acts as the token's agent unless ``AGENT_ID`` names one.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

import httpx
from baton.server.sessions import HOOK_TYPES
from baton.server.store import utc_now

# Claude Code's hook event names -> Baton's hook types.
CLAUDE_EVENTS = {
    "SessionStart": "session_start", "UserPromptSubmit": "prompt_submit",
    "PreToolUse": "pre_tool_use", "PostToolUse": "post_tool_use",
    "PostToolUseFailure": "post_tool_failure", "PreCompact": "pre_compact",
    "SubagentStart": "subagent_start", "SubagentStop": "subagent_stop",
    "Notification": "notification", "TaskCompleted": "task_completed", "Stop": "stop",
    "SessionEnd": "session_end",
}  # fmt: skip
TIMEOUT = 3.0


def hook_type(event: str) -> str:
    """Accept Claude Code's names (``PostToolUse``) and Baton's (``post_tool_use``)."""
    found = CLAUDE_EVENTS.get(event, event)
    if found not in HOOK_TYPES:
        known = ", ".join([*CLAUDE_EVENTS, *HOOK_TYPES])
        raise ValueError(f"unknown hook event {event!r}; one of: {known}")
    return found


def project_of(cwd: str) -> str:
    """``BATON_PROJECT``, else the working directory's name (a stable id, not a path)."""
    return os.environ.get("BATON_PROJECT") or os.path.basename(os.path.normpath(cwd)) or "root"


def _headers(agent: str | None, token: str | None) -> dict[str, str]:
    headers = {} if agent is None else {"X-Baton-Agent": agent}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _refused(response: httpx.Response) -> str | None:
    """One line saying why Baton refused the hook's credentials, or None."""
    if response.status_code not in (401, 403, 429):
        return None
    try:
        detail = response.json().get("detail") or response.json().get("error")
    except ValueError:
        detail = response.text[:200]
    fix = "set BATON_TOKEN to a valid token" if response.status_code == 401 else \
        "check BATON_TOKEN and AGENT_ID"  # fmt: skip
    return f"baton hook: Baton refused this hook ({response.status_code}: {detail}); {fix}"


def check(base_url: str, agent: str | None, token: str | None) -> int:
    """``baton hook --check``: 0 when Baton answers and accepts the credentials."""
    try:
        response = httpx.get(f"{base_url}/v1/whoami", headers=_headers(agent, token),
                             timeout=TIMEOUT)  # fmt: skip
    except httpx.HTTPError as error:
        print(f"baton hook: Baton is not reachable at {base_url} ({error})", file=sys.stderr)
        return 1
    refused = _refused(response)
    if refused or response.status_code >= 400:
        print(refused or f"baton hook: {response.status_code} {response.text[:200]}",
              file=sys.stderr)  # fmt: skip
        return 1
    who = response.json()
    print(f"baton hook: ok, {base_url} records hook events as {who['agent']} in namespace "
          f"{who['namespace']} ({who['credential']})")  # fmt: skip
    return 0


def run(event: str, stdin: TextIO, base_url: str, agent: str | None, token: str | None) -> int:
    kind = hook_type(event)
    raw = stdin.read()
    payload: dict[str, Any] = json.loads(raw) if raw.strip() else {}
    session_id = str(payload.get("session_id") or payload.get("sessionId") or "")
    cwd = os.path.abspath(str(payload.get("cwd") or os.getcwd()))
    if not session_id:
        print("baton hook: the payload has no session_id; nothing recorded", file=sys.stderr)
        return 0
    project = project_of(cwd)
    headers = _headers(agent, token)
    try:
        with httpx.Client(base_url=base_url, headers=headers, timeout=TIMEOUT) as http:
            if kind == "session_start":
                http.post("/v1/sessions", json={"id": session_id, "project": project, "cwd": cwd})
            response = http.post("/v1/observations", json={
                "hook_type": kind, "session_id": session_id, "project": project, "cwd": cwd,
                "timestamp": utc_now(), "data": payload,
            })  # fmt: skip
            if kind == "session_end":
                http.post(f"/v1/sessions/{session_id}/end", json={})
        refused = _refused(response)
        if refused:
            print(refused, file=sys.stderr)
        elif response.status_code >= 400:
            print(f"baton hook: {response.status_code} {response.text[:300]}", file=sys.stderr)
    except httpx.HTTPError as error:
        print(f"baton hook: Baton is not reachable at {base_url} ({error})", file=sys.stderr)
    return 0
