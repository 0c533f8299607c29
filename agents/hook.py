"""``baton hook EVENT``: Baton in Claude Code's hooks without other software (and in
Gemini CLI's and Codex's, which send Claude Code's payloads and take its answers).

Each call turns one hook payload (JSON on stdin) into an observation, and gives context
back where Claude Code takes it:

- ``SessionStart``: the previous session's "where were we" for this directory, printed as
  ``hookSpecificOutput.additionalContext`` JSON (Claude Code adds it to the conversation);
  after a compaction (``source: compact``) this session's own state instead;
- ``PreCompact``: this session's state and open question, printed as plain text;
- ``PreToolUse``: what earlier sessions did to the files the tool is about to touch;
- ``Stop`` ends the session after every turn (as agentmemory does), so its end time,
  concepts and open question are current; the last assistant message is read from the
  local transcript when the payload does not carry it.

A hook must never get in the agent's way nor lose an event: a malformed payload or an
unknown event costs one line on stderr; an event Baton cannot take now (unreachable, 503,
a refused token) waits in the data dir's spool (``baton.agents.spool``) and is delivered in
order later; the command always exits 0. It uses only the standard library (it runs on
every tool use). ``BATON_TOKEN`` is
sent as a bearer token; with a token the hook acts as the token's agent unless ``AGENT_ID``
names one.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import sys
import time

from baton.agents.spool import RETRY_STATUSES, Busy, Rejected, Spool, Unreachable
from baton.server.model.clock import utc_now
from baton.server.model.endpoint import base_url_of, data_dir_of, token_of
from baton.server.model.patches import patched_files

TYPE_CHECKING = False  # typing itself costs a few milliseconds of every call
if TYPE_CHECKING:
    from typing import Any, TextIO

    from baton.agents.spool import Call

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
# A tool's output can be megabytes (a file read), past the API's body limit; what Baton keeps
# of an event is its title, a few hundred characters of narrative and the files, so longer
# strings are cut before sending.
LONGEST_STRING = 16 * 1024
COMPACT_BUDGET = 1500
# Claude Code writes the payload and closes stdin at once; a caller that keeps the pipe open
# is not waited on for longer than this after its last byte (the agent waits on its hook).
STDIN_SECONDS = 5.0
READ_SIZE = 65536


class Refused(Exception):
    """Baton answered with an error: the one line to print, and the status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def project_of(cwd: str) -> str:
    """``BATON_PROJECT``, else the working directory's name (a stable id, not a path)."""
    return os.environ.get("BATON_PROJECT") or os.path.basename(os.path.normpath(cwd)) or "root"


class Baton:
    """The few API calls a hook makes: one JSON request per connection, through the
    standard library's ``http.client``."""

    def __init__(self, base_url: str, agent: str | None, token: str | None) -> None:
        self.base_url = base_url.rstrip("/")
        scheme, _, rest = self.base_url.partition("://")
        if scheme not in ("http", "https") or not rest:
            raise ValueError(f"BATON_URL must be an http:// or https:// URL, got {base_url!r}")
        address, _, self.prefix = rest.partition("/")
        self.prefix = "/" + self.prefix if self.prefix else ""
        host, colon, port = address.rpartition(":")
        if not colon or not port.isdigit():  # no port given (or an IPv6 literal without one)
            host, port = address, "443" if scheme == "https" else "80"
        self.tls = scheme == "https"
        self.host, self.port = host.strip("[]"), int(port)
        self.headers = {"Host": address, "Content-Type": "application/json"}
        if agent is not None:
            self.headers["X-Baton-Agent"] = agent
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: Any = None, agent: str | None = None) -> Any:
        """The JSON answer (as ``agent`` when given); :class:`Refused` for an error status."""
        data = None if body is None else json.dumps(body).encode()
        headers = {**self.headers, "X-Baton-Agent": agent} if agent else self.headers
        kind = http.client.HTTPSConnection if self.tls else http.client.HTTPConnection
        connection = kind(self.host, self.port, timeout=TIMEOUT)
        try:
            connection.request(method, self.prefix + path, body=data, headers=headers)
            response = connection.getresponse()
            status, answer = response.status, response.read()
        finally:
            connection.close()
        if status >= 400:
            raise Refused(_refusal(status, answer), status)
        return json.loads(answer or b"null")

    def send(self, call: Call) -> object:
        """One write of a hook event (from the spool or live), as the agent it names:
        :class:`Unreachable` when Baton cannot take it now, :class:`Rejected` when it
        refuses it for itself."""
        try:
            return self.call(call["method"], call["path"], call.get("body"), call.get("agent"))
        except json.JSONDecodeError:  # taken (2xx), with an answer that is not JSON
            return None
        except (OSError, http.client.HTTPException) as error:  # (an answer that is not HTTP)
            raise Unreachable(f"Baton is not reachable at {self.base_url} ({error})") from None
        except Refused as refused:
            if refused.status in RETRY_STATUSES:
                raise Unreachable(str(refused)) from None
            raise Rejected(str(refused)) from None


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


def trimmed(value: Any) -> Any:
    """``value`` with every string longer than ``LONGEST_STRING`` cut to it (marked)."""
    if isinstance(value, str):
        return value if len(value) <= LONGEST_STRING else value[:LONGEST_STRING] + " [cut]"
    if isinstance(value, dict):
        return {key: trimmed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trimmed(item) for item in value]
    return value


def files_of(payload: dict[str, Any]) -> list[str]:
    """The files a tool use names: its input's path fields, or those of a patch (Codex's
    ``apply_patch``), relative ones from the payload's ``cwd``."""
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict):
        return []
    return patched_files(tool_input.get("command"), payload.get("cwd")) or [
        value for key in FILE_KEYS if isinstance(value := tool_input.get(key), str) and value
    ]


def flush(baton: Baton, spool: Spool, wait_seconds: float = 0.0) -> int:
    """Deliver everything waiting in ``spool`` now (``baton hook --flush``; ``baton serve``
    as it starts, in open mode), after waiting up to ``wait_seconds`` for Baton to answer.
    How many calls were delivered; :class:`Unreachable` when some still wait."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            baton.call("GET", "/healthz")
            break
        except (OSError, Refused):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
    with spool.delivering(seconds=60.0):
        return spool.deliver(baton.send, seconds=float("inf"))


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


def run(event: str, stdin: TextIO, baton: Baton, spool: Spool, agent: str | None = None) -> int:
    """Handle one hook event; always exits 0 (see the module docstring)."""
    try:
        recorded = parse_event(event, stdin)
    except ValueError as error:
        print(f"baton hook: {error}", file=sys.stderr)
        return 0
    if recorded is None:
        return 0  # an event Baton does not record (e.g. PermissionRequest): accepted
    try:
        delivered, waiting = send_writes(baton, spool, writes_of(recorded, agent))
    except Rejected as error:
        print(f"baton hook: {error}", file=sys.stderr)
        return 0
    except OSError as error:  # Baton could not take it and the spool cannot keep it
        print(f"baton hook: event lost: {spool.folder} is unusable ({error})", file=sys.stderr)
        return 0
    dropped = spool.take_dropped() if recorded.kind == "session_start" else 0
    if waiting is not None:
        kept = (
            ""
            if "not kept" in waiting
            else (
                f"; the event is kept in {spool.folder} and delivered in order once Baton takes it"
            )
        )
        print(f"baton hook: {waiting}{kept}", file=sys.stderr)
    notes = spool_notes(delivered, dropped, waiting, spool)
    try:
        output = context_of(recorded, baton, notes) if waiting is None else ""
    except (Refused, ValueError) as error:
        print(f"baton hook: {error}", file=sys.stderr)
        output = ""
    except OSError as error:
        print(f"baton hook: Baton is not reachable at {baton.base_url} ({error})", file=sys.stderr)
        output = ""
    if recorded.kind == "session_start" and notes and not output:
        output = session_start_output(notes)
    if output:
        sys.stdout.write(output)
    return 0


def send_writes(baton: Baton, spool: Spool, writes: list[Call]) -> tuple[int, str | None]:
    """Send ``writes`` after whatever waits in the spool, and keep in the spool what Baton
    cannot take now (in order, after what waits). How many waiting calls were delivered, and
    why the rest waits (None when nothing does). :class:`Rejected` when Baton refuses one
    of ``writes`` itself; OSError when Baton cannot take them and the spool cannot keep them."""
    if not spool.pending():
        try:
            _send_all(baton, writes)
            return 0, None
        except Unreachable as error:
            return 0, _keep(spool, writes, str(error))
    delivered = 0
    try:
        with spool.delivering():
            delivered = spool.deliver(baton.send)
            if not spool.pending():
                _send_all(baton, writes)
                return delivered, None
            waiting = "earlier hook events are still being delivered"
    except Busy as busy:  # another process delivers: ours go behind, it or the next sends them
        waiting = str(busy)
    except Unreachable as error:
        waiting = str(error)
    except OSError as unusable:  # the spool cannot be used (a full or read-only disk)
        try:
            _send_all(baton, writes)  # ours go live, ahead of the backlog: better than lost
        except Unreachable as error:
            raise OSError(f"{error}, and {unusable}") from None
        return delivered, None
    return delivered, _keep(spool, writes, waiting)


def _keep(spool: Spool, writes: list[Call], why: str) -> str:
    """Append ``writes`` to the spool; why they wait, as told to the user."""
    if writes and not spool.append(writes):
        return f"{why}; the spool {spool.folder} is full and this event was not kept"
    return why


def _send_all(baton: Baton, writes: list[Call]) -> None:
    """Send ``writes`` in order, removing each from the list once Baton took it."""
    while writes:
        baton.send(writes[0])
        writes.pop(0)


def spool_notes(delivered: int, dropped: int, waiting: str | None, spool: Spool) -> str:
    """What the agent is told about the spool at SessionStart ("" when nothing happened)."""
    notes = []
    if waiting is not None:
        notes.append(
            f"Baton (the shared memory) cannot take hook events right now ({waiting}): "
            f"this session's events are kept in {spool.folder} and delivered in order once "
            "it does. If no Baton server runs, start one with `baton serve`."
        )
    if delivered:
        notes.append(f"Baton received {delivered} hook calls kept while it was unreachable.")
    if dropped:
        notes.append(
            f"{dropped} hook events were not kept while Baton was unreachable: the spool "
            f"in {spool.folder} was full."
        )
    return " ".join(notes)


def session_start_output(context: str) -> str:
    """Claude Code's SessionStart answer carrying ``context`` to the agent."""
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}}
    )


def read_payload(stdin: TextIO) -> str:
    """What comes on stdin until it closes, or until nothing more came for
    ``STDIN_SECONDS`` (a writer that keeps it open). A terminal (no payload piped in) is
    refused at once. Where select cannot wait on a pipe (Windows), stdin is read to its end."""
    if stdin.isatty():
        raise ValueError("the hook's JSON payload comes on stdin (Claude Code pipes it in)")
    try:
        descriptor = stdin.fileno()
        select.select([descriptor], [], [], 0)
    except (OSError, ValueError):  # not a file (a StringIO), or a pipe select cannot wait on
        return stdin.read()
    chunks: list[bytes] = []
    while True:
        if not select.select([descriptor], [], [], STDIN_SECONDS)[0]:
            if not chunks:
                raise ValueError(f"no payload came on stdin within {STDIN_SECONDS:g} s")
            break  # the writer keeps stdin open: what came is the payload
        chunk = os.read(descriptor, READ_SIZE)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


class Event:
    """A hook event as Baton records it."""

    def __init__(self, kind: str, session_id: str, cwd: str, payload: dict[str, Any]) -> None:
        self.kind, self.session_id, self.cwd, self.payload = kind, session_id, cwd, payload
        self.project = project_of(cwd)


def parse_event(event: str, stdin: TextIO) -> Event | None:
    """The event named ``event`` with its payload from stdin; None for an event Baton does
    not record. ValueError (one line) for a payload it cannot record."""
    if not event:
        raise ValueError("name the hook event, e.g. baton hook PostToolUse")
    kind = CLAUDE_EVENTS.get(event, event)
    raw = read_payload(stdin)
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json follows
        raise ValueError("the payload on stdin is not JSON; nothing recorded") from None
    if not isinstance(payload, dict):
        raise ValueError("the payload on stdin is not a JSON object; nothing recorded")
    if kind not in HOOK_TYPES:
        return None
    session_id = str(payload.get("session_id") or payload.get("sessionId") or "")
    if not session_id:
        raise ValueError("the payload has no session_id; nothing recorded")
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else ""
    cwd = os.path.abspath(cwd) if cwd else os.getcwd()
    if kind in ("stop", "subagent_stop", "session_end") and not payload.get(
        "last_assistant_message"
    ):
        message = last_assistant_message(payload.get("transcript_path"))
        if message:
            payload = {**payload, "last_assistant_message": message}
    return Event(kind, session_id, cwd, payload)


def writes_of(event: Event, agent: str | None) -> list[Call]:
    """The calls that record ``event`` (what the spool keeps when Baton cannot take them)."""
    writes: list[Call] = []
    if event.kind == "session_start":
        body = {"id": event.session_id, "project": event.project, "cwd": event.cwd}
        writes.append({"method": "POST", "path": "/v1/sessions", "body": body})
    observation = {
        "hook_type": event.kind,
        "session_id": event.session_id,
        "project": event.project,
        "cwd": event.cwd,
        "timestamp": utc_now(),
        "data": trimmed(event.payload),
    }
    writes.append({"method": "POST", "path": "/v1/observations", "body": observation})
    if event.kind in ("stop", "session_end"):
        path = f"/v1/sessions/{event.session_id}/end"
        writes.append({"method": "POST", "path": path, "body": {}})
    for write in writes:
        write["agent"] = agent
    return writes


def context_of(event: Event, baton: Baton, notes: str = "") -> str:
    """The text to print for Claude Code after the event is recorded (may be empty):
    SessionStart's "where were we" (after ``notes`` about the spool; after a compaction, the
    session's own state), PreCompact's state, PreToolUse's file history."""
    session_id, project = event.session_id, event.project
    if event.kind == "session_start":
        if event.payload.get("source") == "compact":  # the same session goes on, compacted
            found = {"context": compact_context(event, baton)}
        else:
            found = baton.call(
                "POST",
                "/v1/context",
                {"session_id": session_id, "kind": "start", "cwd": event.cwd, "project": project},
            )
        context = "\n\n".join(part for part in (notes, found["context"]) if part)
        return session_start_output(context) if context else ""
    if event.kind == "pre_compact":
        return compact_context(event, baton)
    if event.kind == "pre_tool_use" and files_of(event.payload):
        found = baton.call(
            "POST",
            "/v1/enrich",
            {"session_id": session_id, "files": files_of(event.payload), "project": project},
        )
        return str(found["context"])
    return ""


def compact_context(event: Event, baton: Baton) -> str:
    """This session's state and open question, for a context about to be (or just) compacted."""
    body = {
        "session_id": event.session_id,
        "kind": "compact",
        "project": event.project,
        "budget": COMPACT_BUDGET,
    }
    return str(baton.call("POST", "/v1/context", body)["context"])


USAGE = """usage: baton hook [--check | --flush] EVENT

Record a Claude Code hook event; its JSON payload comes on stdin. When Baton cannot take
it, the event waits in the spool (BATON_DATA_DIR/hook-spool) for the next hook call.

  EVENT    PostToolUse, UserPromptSubmit, ... or post_tool_use, ...
  --check  say whether Baton is reachable and accepts BATON_TOKEN, then exit
  --flush  deliver the events waiting in the spool now, then exit
"""


def main(arguments: list[str]) -> int:
    """``baton hook [--check] EVENT``, reading ``BATON_URL`` (or ``BATON_HOST`` and
    ``BATON_PORT``), ``BATON_TOKEN`` and ``AGENT_ID``. Kept to the standard library's lightest
    modules (no argparse either) so a call costs tens of milliseconds: it runs per tool use."""
    if "-h" in arguments or "--help" in arguments:
        print(USAGE, end="")
        return 0
    checking = "--check" in arguments
    flushing = "--flush" in arguments
    rest = [argument for argument in arguments if argument not in ("--check", "--flush")]
    if len(rest) > 1 or any(argument.startswith("-") for argument in rest):
        print(f"baton hook: unexpected arguments {' '.join(rest)}\n{USAGE}", file=sys.stderr)
        return 2 if checking or flushing else 0
    try:
        token = token_of(os.environ)
    except ValueError as error:  # an unreadable BATON_TOKEN_FILE: say so, never block
        print(f"baton hook: {error}", file=sys.stderr)
        return 1 if checking or flushing else 0
    # With a token the hook acts as the token's agent unless AGENT_ID names one (Baton
    # checks the name: a bad one is answered 400 and printed as one line).
    agent = os.environ.get("AGENT_ID") or (None if token else "claude-code")
    try:
        base_url = base_url_of(os.environ)
    except ValueError as error:  # a bad BATON_PORT: say so, never block the agent
        print(f"baton hook: {error}", file=sys.stderr)
        return 1 if checking or flushing else 0
    if checking:
        return check(base_url, agent, token)
    try:
        baton = Baton(base_url, agent, token)
    except ValueError as error:
        print(f"baton hook: {error}", file=sys.stderr)
        return 1 if flushing else 0
    spool = Spool(data_dir_of(os.environ), base_url, token)
    if flushing:
        try:
            delivered = flush(baton, spool)
        except Unreachable as error:
            print(f"baton hook: {error}; the rest waits in {spool.folder}", file=sys.stderr)
            return 1
        print(f"baton hook: delivered {delivered} waiting calls; none left in {spool.folder}")
        return 0
    return run(rest[0] if rest else "", sys.stdin, baton, spool, agent)
