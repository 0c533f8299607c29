"""``baton mcp``: Baton's MCP tools on stdin/stdout, answering a host's first requests at once.

Importing the MCP SDK and Baton's stores takes a second or more, and hosts give a server
little time to answer ``initialize`` (Cline: 1.5 s). So this module, which imports only the
standard library and Baton's lightest modules, starts that import on a thread and answers
``initialize``, ``tools/list`` and ``ping`` itself meanwhile, from ``mcp_answers.json``: the
answers the SDK's server gives, written by the SDK itself (``make mcp-answers``; a test
holds the file equal to them). Every other message is kept. Once the SDK is loaded the
conversation is the SDK server's: what was kept first (``initialize`` too, its second
answer dropped), then the rest as it arrives.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from typing import IO, Any

from baton.server.errors import InvalidInput
from baton.server.settings import Settings
from baton.server.validation import ANONYMOUS, check_agent

ANSWERS_FILE = "mcp_answers.json"


def early_answers() -> dict[str, Any]:
    """The SDK server's answers this module gives before the SDK is loaded."""
    answers: dict[str, Any] = json.loads(
        resources.files(__package__).joinpath(ANSWERS_FILE).read_text()
    )
    return answers


def early_answer(message: Any, answers: dict[str, Any], initialized: bool) -> Any | None:
    """The answer to ``message`` the SDK's server would give, or None when it is not one of
    those this module gives (the SDK answers it, malformed ones included)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    method, params = message.get("method"), message.get("params")
    if "id" not in message or not isinstance(message["id"], (int, str)):
        return None
    if method == "initialize" and not initialized:
        if not (
            isinstance(params, dict)
            and isinstance(params.get("protocolVersion"), str)
            and isinstance(params.get("capabilities"), dict)
            and isinstance(params.get("clientInfo"), dict)
            and isinstance(params["clientInfo"].get("name"), str)
            and isinstance(params["clientInfo"].get("version"), str)
        ):
            return None
        versions: list[str] = answers["versions"]
        asked = params["protocolVersion"]
        result = {"protocolVersion": asked if asked in versions else versions[-1]}
        result.update(answers["initialize"])
    elif method == "tools/list" and initialized and not (params or {}).get("cursor"):
        result = answers["tools/list"]
    elif method == "ping" and initialized:
        result = {}
    else:
        return None
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


class Lines:
    """The lines of a stream, read by a thread of their own; None once it ends."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.queue: queue.Queue[bytes | None] = queue.Queue()
        self.stream = stream
        threading.Thread(target=self.read, name="baton-mcp-stdin", daemon=True).start()

    def read(self) -> None:
        for line in self.stream:
            self.queue.put(line)
        self.queue.put(None)

    def get(self, timeout: float) -> bytes | None:
        """The next line (None at the end); raises ``queue.Empty`` after ``timeout``."""
        return self.queue.get(timeout=timeout)

    def next(self) -> bytes | None:
        """The next line, once there is one (None at the end)."""
        return self.queue.get()


class Wire:
    """What goes to the host: the SDK's messages, less its answers to requests this
    module has answered already."""

    def __init__(self, raw: IO[bytes], answered: set[int | str]) -> None:
        self.raw = raw
        self.answered = answered

    def send(self, message: Any) -> None:
        self.raw.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self.raw.flush()

    async def write(self, text: str) -> None:
        if self.answered:
            message = json.loads(text)
            answer = isinstance(message, dict) and "method" not in message
            if answer and message.get("id") in self.answered:
                self.answered.discard(message["id"])
                return
        self.raw.write(text.encode())

    async def flush(self) -> None:
        self.raw.flush()


class Incoming:
    """What comes from the host, for the SDK: the messages kept while it loaded, then the
    rest as they arrive."""

    def __init__(self, kept: list[bytes], lines: Lines) -> None:
        self.kept = kept
        self.lines = lines

    def __aiter__(self) -> AsyncIterator[str]:
        return self.each()

    async def each(self) -> AsyncIterator[str]:
        import anyio.to_thread

        for kept in self.kept:
            yield kept.decode("utf-8", errors="replace")
        while (line := await anyio.to_thread.run_sync(self.lines.next)) is not None:
            yield line.decode("utf-8", errors="replace")


class Loading(threading.Thread):
    """Imports the SDK and Baton's stores while the host is answered."""

    def __init__(self) -> None:
        super().__init__(name="baton-mcp-load", daemon=True)
        self.failed: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            import baton.server.mcp_server  # noqa: F401
        except BaseException as error:  # reported by the main thread
            self.failed = error


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="baton mcp", add_help=False)
    parser.add_argument("--agent", default=None)
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> int:
    """``baton mcp [--agent NAME]`` (``baton mcp --help`` is the full CLI's)."""
    args = parse(argv)
    try:
        agent = check_agent(args.agent or os.environ.get("AGENT_ID") or ANONYMOUS, "--agent")
        settings = Settings.from_env()
    except (InvalidInput, ValueError) as error:
        print(f"baton: {error}", file=sys.stderr)
        return 2
    loading = Loading()
    # The wire is a copy of fd 1; fd 1 itself now writes to stderr, so nothing an imported
    # module prints can corrupt the conversation (the SDK's stdio transport does the same).
    answered: set[int | str] = set()
    wire = Wire(os.fdopen(os.dup(sys.stdout.fileno()), "wb"), answered)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    lines = Lines(sys.stdin.buffer)
    answers = early_answers()
    kept: list[bytes] = []
    initialized = False
    while loading.is_alive():
        try:
            line = lines.get(timeout=0.02)
        except queue.Empty:
            continue
        if line is None:
            return 0  # the host went away before anything else happened
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        answer = early_answer(message, answers, initialized)
        if answer is None or message["method"] == "initialize":
            kept.append(line)  # the SDK's server must see initialize too
        if answer is not None:
            wire.send(answer)
            answered.add(answer["id"])
            initialized = True
    if loading.failed is not None:
        raise loading.failed
    from baton.server.logs import configure_logging
    from baton.server.mcp_server import run_stdio

    configure_logging()
    import asyncio

    asyncio.run(run_stdio(settings, agent, Incoming(kept, lines), wire))
    return 0
