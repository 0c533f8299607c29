"""``baton hook EVENT``: Baton in Claude Code's hooks without other software.

Each call turns one hook payload (JSON on stdin) into an observation, and gives context
back where Claude Code takes it:

- ``SessionStart``: the previous session's "where were we" for this directory, printed as
  ``hookSpecificOutput.additionalContext`` JSON (Claude Code adds it to the conversation);
- ``PreCompact``: this session's state and open question, printed as plain text;
- ``PreToolUse``: what earlier sessions did to the files the tool is about to touch;
- ``Stop`` ends the session after every turn (as agentmemory does), so its end time,
  concepts and open question are current; the last assistant message is read from the
  local transcript when the payload does not carry it.

A hook must never get in the agent's way: a malformed payload, an unknown event, Baton
being unreachable or refusing the token each cost one line on stderr, and the command still
exits 0. It uses only the standard library (it runs on every tool use). ``BATON_TOKEN`` is
sent as a bearer token; with a token the hook acts as the token's agent unless ``AGENT_ID``
names one.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any, TextIO

from baton.server.clock import utc_now

# Claude Code's hook event names -> Baton's hook types.
CLAUDE_EVENTS = {
    "SessionStart": "session_start",
    "UserPromptSubmit": "prompt_submit",
    "PreToolUse": "pre_tool_use",
    "PostToolUse": "post_tool_use",
    "PostToolUseFailure": "post_tool_failure",
    "PreCompact": "pre_compact",
    "SubagentStart": "subagent_start",
    "SubagentStop": "subagent_stop",
    "Notification": "notification",
    "TaskCompleted": "task_completed",
    "Stop": "stop",
    "SessionEnd": "session_end",
}
HOOK_TYPES = frozenset(CLAUDE_EVENTS.values())
FILE_KEYS = ("file_path", "path", "file", "notebook_path")
TIMEOUT = 3.0
TRANSCRIPT_TAIL = 256 * 1024  # bytes of the transcript read for the last assistant message
COMPACT_BUDGET = 1500


class Refused(Exception):
    """Baton answered with an error: the one line to print."""


def project_of(cwd: str) -> str:
    """``BATON_PROJECT``, else the working directory's name (a stable id, not a path)."""
    return os.environ.get("BATON_PROJECT") or os.path.basename(os.path.normpath(cwd)) or "root"


class Baton:
    """The few API calls a hook makes, over the standard library's HTTP client."""

    def __init__(self, base_url: str, agent: str | None, token: str | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if agent is not None:
            self.headers["X-Baton-Agent"] = agent
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.base_url}{path}", data=data, method=method, headers=self.headers
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            raise Refused(_refusal(error.code, error.read())) from None


def _refusal(status: int, body: bytes) -> str:
    """One line saying why Baton refused."""
    try:
        answer = json.loads(body)
        detail = answer.get("detail") or answer.get("error") or answer.get("title")
    except (ValueError, AttributeError):
        detail = body[:200].decode("utf-8", "replace")
    if status == 401:
        return f"Baton refused this hook ({status}: {detail}); set BATON_TOKEN to a valid token"
    if status in (403, 429):
        return f"Baton refused this hook ({status}: {detail}); check BATON_TOKEN and AGENT_ID"
    return f"Baton answered {status}: {detail}"


def last_assistant_message(transcript_path: object) -> str | None:
    """The text of the last assistant message in a Claude Code transcript (JSON lines)."""
    if not isinstance(transcript_path, str) or not transcript_path.endswith(".jsonl"):
        return None
    try:
        with open(transcript_path, "rb") as transcript:
            transcript.seek(max(0, os.path.getsize(transcript_path) - TRANSCRIPT_TAIL))
            lines = transcript.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("message") if isinstance(entry, dict) else None
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        texts = (
            [content]
            if isinstance(content, str)
            else [
                block.get("text", "")
                for block in content or []
                if isinstance(block, dict) and block.get("type") == "text"
            ]
        )
        text = " ".join(t for t in texts if t).strip()
        if text:
            return text
    return None


def files_of(payload: dict[str, Any]) -> list[str]:
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict):
        return []
    return [value for key in FILE_KEYS if isinstance(value := tool_input.get(key), str) and value]


def check(base_url: str, agent: str | None, token: str | None) -> int:
    """``baton hook --check``: 0 when Baton answers and accepts the credentials."""
    try:
        who = Baton(base_url, agent, token).call("GET", "/v1/whoami")
    except Refused as refused:
        print(f"baton hook: {refused}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as error:
        print(f"baton hook: Baton is not reachable at {base_url} ({error})", file=sys.stderr)
        return 1
    print(
        f"baton hook: ok, {base_url} records hook events as {who['agent']} in namespace "
        f"{who['namespace']} ({who['credential']})"
    )
    return 0


def run(event: str, stdin: TextIO, base_url: str, agent: str | None, token: str | None) -> int:
    """Handle one hook event; always exits 0 (see the module docstring)."""
    try:
        output = handle(event, stdin, Baton(base_url, agent, token))
    except (Refused, ValueError) as error:
        print(f"baton hook: {error}", file=sys.stderr)
        return 0
    except OSError as error:
        print(f"baton hook: Baton is not reachable at {base_url} ({error})", file=sys.stderr)
        return 0
    if output:
        sys.stdout.write(output)
    return 0


def handle(event: str, stdin: TextIO, baton: Baton) -> str:
    """Record the event; the text to print for Claude Code (may be empty)."""
    if not event:
        raise ValueError("name the hook event, e.g. baton hook PostToolUse")
    kind = CLAUDE_EVENTS.get(event, event)
    raw = stdin.read()
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise ValueError("the payload on stdin is not JSON; nothing recorded") from None
    if not isinstance(payload, dict):
        raise ValueError("the payload on stdin is not a JSON object; nothing recorded")
    if kind not in HOOK_TYPES:
        return ""  # an event Baton does not record (e.g. PermissionRequest): accepted
    session_id = str(payload.get("session_id") or payload.get("sessionId") or "")
    if not session_id:
        raise ValueError("the payload has no session_id; nothing recorded")
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else ""
    cwd = os.path.abspath(cwd) if cwd else os.getcwd()
    project = project_of(cwd)
    if kind in ("stop", "subagent_stop", "session_end") and not payload.get(
        "last_assistant_message"
    ):
        message = last_assistant_message(payload.get("transcript_path"))
        if message:
            payload = {**payload, "last_assistant_message": message}
    if kind == "session_start":
        baton.call("POST", "/v1/sessions", {"id": session_id, "project": project, "cwd": cwd})
    baton.call(
        "POST",
        "/v1/observations",
        {
            "hook_type": kind,
            "session_id": session_id,
            "project": project,
            "cwd": cwd,
            "timestamp": utc_now(),
            "data": payload,
        },
    )
    if kind in ("stop", "session_end"):
        baton.call("POST", f"/v1/sessions/{session_id}/end", {})
    if kind == "session_start":
        found = baton.call(
            "POST",
            "/v1/context",
            {"session_id": session_id, "kind": "start", "cwd": cwd, "project": project},
        )
        if found["context"]:
            return json.dumps(
                {
                    "hookSpecificOutput": {
                        "hookEventName": "SessionStart",
                        "additionalContext": found["context"],
                    }
                }
            )
    if kind == "pre_compact":
        found = baton.call(
            "POST",
            "/v1/context",
            {
                "session_id": session_id,
                "kind": "compact",
                "project": project,
                "budget": COMPACT_BUDGET,
            },
        )
        return str(found["context"])
    if kind == "pre_tool_use" and files_of(payload):
        found = baton.call(
            "POST",
            "/v1/enrich",
            {"session_id": session_id, "files": files_of(payload), "project": project},
        )
        return str(found["context"])
    return ""


def main(arguments: list[str]) -> int:
    """``baton hook [--check] EVENT``, reading ``BATON_*`` settings and ``AGENT_ID``; kept
    free of the server stack so a call costs tens of milliseconds (it runs per tool use)."""
    import argparse

    from baton.server.settings import Settings
    from baton.server.validation import check_agent

    parser = argparse.ArgumentParser(
        prog="baton hook", description="record a Claude Code hook event (JSON on stdin)"
    )
    parser.add_argument(
        "event",
        nargs="?",
        default="",
        help="PostToolUse, UserPromptSubmit, ... or post_tool_use, ...",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="say whether Baton is reachable and accepts BATON_TOKEN, then exit",
    )
    args = parser.parse_args(arguments)
    try:
        settings = Settings.from_env()
        # With a token the hook acts as the token's agent unless AGENT_ID names one.
        named = os.environ.get("AGENT_ID") or (None if settings.token else "claude-code")
        agent = None if named is None else check_agent(named, field="AGENT_ID")
    except ValueError as error:  # a bad setting: say so, never block the agent
        print(f"baton hook: {error}", file=sys.stderr)
        return 1 if args.check else 0
    if args.check:
        return check(settings.base_url, agent, settings.token)
    return run(args.event, sys.stdin, settings.base_url, agent, settings.token)
