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
import asyncio
import json
import os
import select
import stat
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from typing import IO, Any

from baton.server.mcp.mcp_messages import handshake_version, request_id
from baton.server.model.errors import InvalidInput
from baton.server.model.validation import ANONYMOUS, check_agent
from baton.server.runtime.settings import Settings

ANSWERS_FILE = "mcp_answers.json"
READ_SIZE = 64 * 1024
MAX_LINE = 256 * 1024 * 1024  # one JSON-RPC message; BATON_MAX_VALUE_BYTES bounds a value
PIPE_SIZE = 64 * 1024  # what a pipe holds on Linux: a smaller write never waits for the host


def early_answers() -> dict[str, Any]:
    """The SDK server's answers this module gives before the SDK is loaded."""
    answers: dict[str, Any] = json.loads(
        resources.files(__package__).joinpath(ANSWERS_FILE).read_text()
    )
    return answers


def early_answer(message: Any, answers: dict[str, Any], initialized: bool) -> Any | None:
    """The answer to ``message`` the SDK's server would give, or None when it is not one of
    those this module gives (the SDK answers it, malformed ones included)."""
    if request_id(message) is None:
        return None
    method, params = message.get("method"), message.get("params")
    if method == "initialize" and not initialized:
        version = handshake_version(message, answers["versions"])
        if version is None:
            return None
        result = {"protocolVersion": version}
        result.update(answers["initialize"])
    elif method == "tools/list" and initialized and not (params or {}).get("cursor"):
        result = answers["tools/list"]
    elif method == "ping" and initialized:
        result = {}
    else:
        return None
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


class Input:
    """The host's lines on a file descriptor: read here, without a thread, until the SDK is
    loaded, then by the event loop (from a pipe, as hosts start servers; from anything else,
    a terminal or a socket shared with the output, by a thread, so that the descriptor is
    never made non-blocking under the output)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.partial = b""  # the start of a line not yet ended
        self.ended = False

    def ready(self, timeout: float) -> list[bytes]:
        """The whole lines that arrive within ``timeout`` seconds (at the end, what was left
        unended, and then none)."""
        if self.ended or not select.select([self.fd], [], [], timeout)[0]:
            return []
        chunk = os.read(self.fd, READ_SIZE)
        if not chunk:
            self.ended = True
            last, self.partial = self.partial, b""
            return [last + b"\n"] if last.strip() else []
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        return [line + b"\n" for line in lines]

    async def lines(self) -> AsyncIterator[bytes]:
        """The rest of the lines."""
        reader = asyncio.StreamReader(limit=MAX_LINE)
        reader.feed_data(self.partial)
        stream = os.fdopen(self.fd, "rb", buffering=0, closefd=False)
        if self.ended or not stat.S_ISFIFO(os.fstat(self.fd).st_mode):
            reader.feed_eof()
            while line := await reader.readline():  # what was read before
                yield line
            while not self.ended and (line := await asyncio.to_thread(stream.readline)):
                yield line
            return
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), stream
        )
        try:
            while line := await reader.readline():
                yield line
        finally:
            transport.close()
            os.set_blocking(self.fd, True)  # as it was, for whoever holds the pipe after


class Wire:
    """What goes to the host: the SDK's messages and the answers to the tool calls it does
    not see, less the SDK's answer to the ``initialize`` this module answered already. A
    message larger than a pipe holds is written by a thread, so a host slow to read it does
    not hold up the other calls; one message at a time."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.answered: int | str | None = None  # the id of initialize, until the SDK answers
        self.turn = asyncio.Lock()

    def send(self, message: Any) -> None:
        self.raw.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self.raw.flush()

    async def write(self, text: str) -> None:
        if self.answered is not None:
            message = json.loads(text)
            answer = isinstance(message, dict) and "method" not in message
            if answer and message.get("id") == self.answered:
                self.answered = None
                return
        data = text.encode()
        async with self.turn:
            if len(data) < PIPE_SIZE:
                self.raw.write(data)
            else:
                await asyncio.to_thread(self.raw.write, data)

    async def flush(self) -> None:
        async with self.turn:
            self.raw.flush()


class Incoming:
    """What comes from the host, for the SDK: the messages kept while it loaded, then the
    rest as they arrive."""

    def __init__(self, kept: list[bytes], lines: Input) -> None:
        self.kept = kept
        self.lines = lines

    def __aiter__(self) -> AsyncIterator[str]:
        return self.each()

    async def each(self) -> AsyncIterator[str]:
        for kept in self.kept:
            yield kept.decode("utf-8", errors="replace")
        async for line in self.lines.lines():
            yield line.decode("utf-8", errors="replace")


class Loading(threading.Thread):
    """Imports the SDK and Baton's stores while the host is answered."""

    def __init__(self) -> None:
        super().__init__(name="baton-mcp-load", daemon=True)
        self.failed: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            import baton.server.mcp.mcp_server  # noqa: F401
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
    # The wire is a copy of fd 1; fd 1 itself now writes to stderr, so nothing an imported
    # module prints can corrupt the conversation (the SDK's stdio transport does the same).
    wire = Wire(os.fdopen(os.dup(sys.stdout.fileno()), "wb"))
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    loading = Loading()
    lines = Input(sys.stdin.fileno())
    answers = early_answers()
    kept: list[bytes] = []
    initialized = False
    while loading.is_alive():
        for line in lines.ready(timeout=0.02):
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            answer = early_answer(message, answers, initialized)
            if answer is None or initialized is False:
                kept.append(line)  # the SDK's server must see initialize too
            if answer is not None:
                wire.send(answer)
                if not initialized:
                    wire.answered = answer["id"]  # the SDK's answer to it is dropped
                initialized = True
        if lines.ended:
            if not kept:
                return 0  # the host went away before asking anything
            loading.join()  # what was kept is the SDK's to answer
    if loading.failed is not None:
        raise loading.failed
    from baton.server.mcp.mcp_server import run_stdio
    from baton.server.runtime.logs import configure_logging

    configure_logging()
    asyncio.run(run_stdio(settings, agent, Incoming(kept, lines), wire))
    return 0
