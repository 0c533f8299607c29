"""A Claude Code user keeps agentmemory's own hooks (the scripts in the pinned npm package
``@agentmemory/agentmemory``, installed by ``make test`` from tests/agentmemory's lock file)
or uses ``baton hook``, and gets the previous session's context back.

The story: session 1 works in a project (prompts, edits, per-turn Stops, a question the
assistant asked that nobody answered, SessionEnd); session 2 starts in a subdirectory. Its
SessionStart context names session 1 and its open question first; PreCompact and PreToolUse
give non-empty context; no empty session appears. Payloads follow Claude Code's documented
hook input (session_id, transcript_path, cwd, hook_event_name and the event's fields).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO

SCRIPTS = REPO / "tests/agentmemory/node_modules/@agentmemory/agentmemory/plugin/scripts"
SESSION_ONE = "a1b2c3d4-1111-4000-8000-000000000001"
SESSION_TWO = "e5f6a7b8-2222-4000-8000-000000000002"
QUESTION = "Should logout revoke the refresh tokens of every device?"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "app" / "src").mkdir(parents=True)
    return tmp_path / "app"


def claude_code(
    event: str, session: str, cwd: Path, transcript: Path, **fields: Any
) -> dict[str, Any]:
    """A hook payload as Claude Code sends it."""
    return {
        "session_id": session,
        "transcript_path": str(transcript),
        "cwd": str(cwd),
        "permission_mode": "default",
        "hook_event_name": event,
        **fields,
    }


def write_transcript(path: Path, *assistant_texts: str) -> None:
    """A Claude Code transcript (JSON lines) whose assistant turns say ``assistant_texts``."""
    lines = []
    for text in assistant_texts:
        lines.append({"type": "user", "message": {"role": "user", "content": "go on"}})
        lines.append(
            {
                "type": "assistant",
                "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
            }
        )
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")


def story(project: Path, transcript: Path) -> list[tuple[str, dict[str, Any]]]:
    """Session 1, event by event: (Claude Code event, payload)."""
    auth = str(project / "src" / "auth.ts")

    def one(event: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        return event, claude_code(event, SESSION_ONE, project, transcript, **fields)

    return [
        one("SessionStart", source="startup"),
        one("UserPromptSubmit", prompt="Rework the refresh token rotation in the auth module"),
        one(
            "PostToolUse",
            tool_name="Edit",
            tool_input={"file_path": auth, "old_string": "rotate()", "new_string": "rotateAll()"},
            tool_response={"filePath": auth, "success": True},
        ),
        one("Stop", stop_hook_active=False),
        one("UserPromptSubmit", prompt="Also rotate the refresh token when the password changes"),
        one(
            "PostToolUse",
            tool_name="Edit",
            tool_input={"file_path": auth, "old_string": "onPassword()", "new_string": "rotate()"},
            tool_response={"filePath": auth, "success": True},
        ),
        one(
            "SubagentStop",
            agent_id="reviewer",
            agent_type="code-reviewer",
            last_assistant_message=f"Rotation now covers password changes. {QUESTION}",
        ),
        one("Stop", stop_hook_active=False),
        one("SessionEnd", reason="exit"),
    ]


def run_script(
    name: str, payload: dict[str, Any], url: str, **env: str
) -> subprocess.CompletedProcess[str]:
    script = SCRIPTS / f"{name}.mjs"
    assert script.exists(), f"{script} is missing: run `make npm-clients` (make test does)"
    return subprocess.run(
        ["node", str(script)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=payload["cwd"],
        env={**os.environ, "AGENTMEMORY_URL": url, "AGENTMEMORY_PROJECT_NAME": "app", **env},
    )


SCRIPT_OF = {
    "SessionStart": "session-start",
    "UserPromptSubmit": "prompt-submit",
    "PostToolUse": "post-tool-use",
    "Stop": "stop",
    "SubagentStop": "subagent-stop",
    "SessionEnd": "session-end",
    "PreCompact": "pre-compact",
    "PreToolUse": "pre-tool-use",
}


def assert_context_leads_with_session_one(context: str) -> None:
    lines = [line for line in context.splitlines() if line.strip()]
    resuming = next(i for i, line in enumerate(lines) if line.startswith("Resuming "))
    assert lines[resuming].startswith(f"Resuming {SESSION_ONE[:7]} ")
    assert lines[resuming + 1] == f"Open question: {QUESTION}", lines


def assert_no_empty_session(api_url: str) -> None:
    sessions = httpx.get(f"{api_url}/v1/sessions").json()
    assert sorted(s["id"] for s in sessions) == sorted([SESSION_ONE, SESSION_TWO])


def test_agentmemorys_own_hooks_get_the_previous_session_back(
    api_url: str, redis_url: str, project: Path, tmp_path: Path
) -> None:
    """agentmemory's real hook scripts against Baton: SessionStart of session 2 (in a
    subdirectory) prints session 1 and its open question first; PreCompact and PreToolUse
    print context too; nothing in between created an empty session."""
    transcript = tmp_path / "one.jsonl"
    inject = {"AGENTMEMORY_INJECT_CONTEXT": "true"}
    for event, payload in story(project, transcript):
        done = run_script(SCRIPT_OF[event], payload, api_url, **inject)
        assert (done.returncode, done.stdout) == (0, ""), (event, done)
    session = httpx.get(f"{api_url}/v1/sessions/{SESSION_ONE}").json()
    assert session["status"] == "completed" and session["observation_count"] >= 5
    assert "refresh" in session["concepts"] and "rotation" in session["concepts"]
    assert not {"session", "start", "prompt", "submit", "edit", "stop"} & set(session["concepts"])

    two = claude_code(
        "SessionStart", SESSION_TWO, project / "src", tmp_path / "two.jsonl", source="startup"
    )
    started = run_script("session-start", two, api_url, **inject)
    assert started.returncode == 0
    assert started.stdout.startswith('<agentmemory-context project="app">')
    assert_context_leads_with_session_one(started.stdout)

    compacting = claude_code(
        "PreCompact",
        SESSION_TWO,
        project / "src",
        tmp_path / "two.jsonl",
        trigger="auto",
        custom_instructions="",
    )
    compacted = run_script("pre-compact", compacting, api_url)
    assert compacted.returncode == 0 and QUESTION in compacted.stdout

    reading = claude_code(
        "PreToolUse",
        SESSION_TWO,
        project / "src",
        tmp_path / "two.jsonl",
        tool_name="Read",
        tool_input={"file_path": str(project / "src/auth.ts")},
    )
    enriched = run_script("pre-tool-use", reading, api_url, **inject)
    assert enriched.returncode == 0
    assert "<agentmemory-file-context>" in enriched.stdout and "auth.ts" in enriched.stdout
    assert_no_empty_session(api_url)


def baton_hook(
    event: str, payload: dict[str, Any], api_url: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # the installed `baton` command, as Claude Code runs it (its fast path for hooks)
        [str(Path(sys.executable).with_name("baton")), "hook", event],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=payload["cwd"],
        env={**os.environ, "BATON_URL": api_url, "BATON_PROJECT": "app", **env},
    )


def test_baton_hook_gets_the_previous_session_back(
    api_url: str, redis_url: str, project: Path, tmp_path: Path
) -> None:
    """The same story through `baton hook`: the question is read from the transcript at
    Stop; SessionStart prints Claude Code's additionalContext JSON; PreCompact and
    PreToolUse print context; an event Baton does not know and a malformed payload are
    accepted with exit 0."""
    transcript = tmp_path / "one.jsonl"
    said = ["Rotation reworked."]
    for event, payload in story(project, transcript):
        if event == "SubagentStop":
            continue  # here the question comes from the transcript at the last Stop
        if event == "Stop":
            write_transcript(transcript, *said)
            said.append(f"Password changes rotate too. {QUESTION}")
        done = baton_hook(event, payload, api_url)
        assert (done.returncode, done.stderr) == (0, ""), (event, done)

    two = claude_code(
        "SessionStart", SESSION_TWO, project / "src", tmp_path / "two.jsonl", source="startup"
    )
    started = baton_hook("SessionStart", two, api_url)
    output = json.loads(started.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "SessionStart"
    assert_context_leads_with_session_one(output["additionalContext"])

    compacting = claude_code(
        "PreCompact",
        SESSION_TWO,
        project / "src",
        tmp_path / "two.jsonl",
        trigger="manual",
        custom_instructions="",
    )
    assert QUESTION in baton_hook("PreCompact", compacting, api_url).stdout
    reading = claude_code(
        "PreToolUse",
        SESSION_TWO,
        project / "src",
        tmp_path / "two.jsonl",
        tool_name="Read",
        tool_input={"file_path": str(project / "src/auth.ts")},
    )
    assert "auth.ts" in baton_hook("PreToolUse", reading, api_url).stdout

    unknown = baton_hook(
        "PermissionRequest",
        claude_code("PermissionRequest", SESSION_TWO, project, transcript),
        api_url,
    )
    assert (unknown.returncode, unknown.stdout, unknown.stderr) == (0, "", "")
    for malformed in ("{not json", "[" * 100_000):  # the second nests past json's recursion
        garbled = subprocess.run(
            [sys.executable, "-m", "baton.server.cli", "hook", "PostToolUse"],
            input=malformed,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "BATON_URL": api_url},
        )
        assert garbled.returncode == 0 and len(garbled.stderr.splitlines()) == 1, garbled.stderr
    assert_no_empty_session(api_url)


# What `claude mcp list` (Claude Code 2.x, run in a project with Baton's hooks) sends, read
# from the host: one SessionEnd for a session id of its own, and nothing else.
MCP_LIST_SESSION = "18e0e4ef-248b-4c88-bee9-8484be3413be"


def test_checking_the_mcp_servers_does_not_become_where_were_we(
    api_url: str, redis_url: str, project: Path, tmp_path: Path
) -> None:
    """After a real session, `claude mcp list` in the same project leaves a completed
    session holding one lone SessionEnd: "where were we" (the next SessionStart and the
    resume route) still answers the real session, never "Resuming … session end"."""
    transcript = tmp_path / "one.jsonl"
    for event, payload in story(project, transcript):
        if event == "Stop":
            write_transcript(transcript, f"Password changes rotate too. {QUESTION}")
        assert baton_hook(event, payload, api_url).returncode == 0
    listing = {
        "session_id": MCP_LIST_SESSION,
        "transcript_path": str(tmp_path / f"{MCP_LIST_SESSION}.jsonl"),
        "cwd": str(project),
        "hook_event_name": "SessionEnd",
        "reason": "other",
    }
    assert baton_hook("SessionEnd", listing, api_url).returncode == 0
    phantom = httpx.get(f"{api_url}/v1/sessions/{MCP_LIST_SESSION}").json()
    assert (phantom["status"], phantom["observation_count"]) == ("completed", 1)

    resumed = httpx.get(f"{api_url}/v1/sessions/resume", params={"cwd": str(project / "src")})
    assert resumed.json()["session"]["id"] == SESSION_ONE
    two = claude_code(
        "SessionStart", SESSION_TWO, project / "src", tmp_path / "two.jsonl", source="startup"
    )
    started = baton_hook("SessionStart", two, api_url)
    assert_context_leads_with_session_one(
        json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    )


def test_the_hook_answers_a_server_that_is_not_http_as_unreachable() -> None:
    """An address that answers with something other than HTTP (another service on Baton's
    port) is "unreachable" to the hook, so the event waits in the spool: never a crash."""
    import socket
    import threading

    from baton.agents.hook import Baton
    from baton.agents.spool import Unreachable

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer_ssh() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"SSH-2.0-OpenSSH\r\n")

    threading.Thread(target=answer_ssh, daemon=True).start()
    call = {"method": "POST", "path": "/agentmemory/observe", "body": {}, "agent": "x"}
    with pytest.raises(Unreachable, match="not reachable"):
        Baton(f"http://127.0.0.1:{port}", "x", None).send(call)
    listener.close()


def test_the_hook_does_not_wait_for_a_server_that_keeps_the_connection_open() -> None:
    """A server (or proxy) that answers but keeps the connection open anyway does not stall
    the hook until its timeout: the answer ends at its Content-Length."""
    import socket
    import threading
    import time

    from baton.agents.hook import Baton

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    body = b'{"agent": "x", "namespace": "default", "credential": "open"}'

    def answer_and_linger() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            time.sleep(5)  # never closes while the hook could still be waiting

    threading.Thread(target=answer_and_linger, daemon=True).start()
    started = time.perf_counter()
    answer = Baton(f"http://127.0.0.1:{port}", "x", None).call("GET", "/v1/whoami")
    assert answer["agent"] == "x" and time.perf_counter() - started < 1.0
    listener.close()


def test_the_hook_loads_only_the_light_standard_modules(api_url: str) -> None:
    """``baton hook`` over http://, from the command's entry point, imports none of Baton's
    server-side dependencies: it runs as a fresh process per tool use."""
    heavy = ("redis", "litestar", "msgspec", "structlog", "rq", "httpx")
    probe = (
        "import io, sys\n"
        "from baton.server.entry import main\n"
        "sys.stdin = io.StringIO(sys.argv[1])\n"
        "status = main(['hook', 'PostToolUse'])\n"
        f"print(status, [name for name in {heavy!r} if name in sys.modules])\n"
    )
    payload = claude_code(
        "PostToolUse",
        SESSION_ONE,
        REPO,
        REPO / "none.jsonl",
        tool_name="Read",
        tool_input={"file_path": "README.md"},
    )
    env = {**os.environ, "BATON_URL": api_url, "AGENT_ID": "hook-probe"}
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(payload)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.stdout.strip(), done.stderr) == ("0 []", "")


def test_a_tool_output_of_megabytes_is_still_recorded(api_url: str, tmp_path: Path) -> None:
    """A Read of a 5 MB file hands the hook a 5 MB payload, far over the API's body limit:
    the hook cuts long strings (Baton keeps a few hundred characters of them) and the event
    is recorded, quietly."""
    project = tmp_path / "repo"
    project.mkdir()
    reading = claude_code(
        "PostToolUse",
        "s-huge-read",
        project,
        tmp_path / "t.jsonl",
        tool_name="Read",
        tool_input={"file_path": str(project / "big.log")},
        tool_response={"content": "x" * 5_000_000},
    )
    done = baton_hook("PostToolUse", reading, api_url)
    assert (done.returncode, done.stderr) == (0, "")
    session = httpx.get(f"{api_url}/v1/sessions/s-huge-read", headers={"X-Baton-Agent": "x"})
    assert session.json()["observation_count"] == 1


def test_a_payload_on_a_pipe_left_open_is_recorded_without_waiting_for_ever(
    api_url: str, tmp_path: Path
) -> None:
    """A caller that writes the payload and keeps stdin open (Claude Code closes it) does
    not hang the hook: once nothing more comes for a few seconds it records what came, and
    exits 0."""
    payload = claude_code("PostToolUse", "s-open-pipe", tmp_path, tmp_path / "t.jsonl")
    hook = subprocess.Popen(
        [str(Path(sys.executable).with_name("baton")), "hook", "PostToolUse"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "BATON_URL": api_url},
    )
    assert hook.stdin is not None and hook.stderr is not None
    hook.stdin.write(json.dumps(payload).encode())
    hook.stdin.flush()
    try:
        assert hook.wait(timeout=30) == 0
        assert hook.stderr.read() == b""
    finally:
        hook.stdin.close()
        hook.kill()
    session = httpx.get(f"{api_url}/v1/sessions/s-open-pipe", headers={"X-Baton-Agent": "x"})
    assert session.json()["observation_count"] == 1


def test_a_hook_run_from_a_terminal_says_where_its_payload_comes_from() -> None:
    """``baton hook PostToolUse`` typed at a terminal does not sit waiting for input: it
    says at once that the payload comes on stdin, and exits 0."""
    import pty

    primary, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [str(Path(sys.executable).with_name("baton")), "hook", "PostToolUse"],
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={**os.environ, "BATON_URL": "http://127.0.0.1:9"},  # never reached
        )
    finally:
        os.close(primary)
        os.close(terminal)
    assert done.returncode == 0
    assert "payload comes on stdin" in done.stderr
