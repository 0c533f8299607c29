"""``baton demo``: the scout/executor story in separate processes on one memory.

It starts (or reuses) the embedded Redis, starts the API server, runs the scout, then the
executor as an RQ agent worker, then the scout again to receive what came back; streams
their transcript; checks the end state; and stops everything it started (the API server
stays up with ``--keep``). Each run uses a fresh namespace, deleted once the run passed
unless ``--keep``, so re-running needs no reset and leaves nothing behind.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

from baton.agents import BatonClient
from baton.agents.client import BatonAPIError
from baton.demo import board, scout
from baton.demo import namespace as demo_namespace
from baton.demo.transcript import COLOUR_ENV, WIDTH, bullet, colour_enabled, plain, section
from baton.server.runtime.connection import embedded_server
from baton.server.runtime.settings import Settings

PREFERRED_PORT = 8765
STALE_LINE = "stale: listing/553/assessment was pinned at v1, now at v2"
TRANSCRIPT_HEADER = """# Demo transcript

*For newcomers: everything `make demo` prints, in full.*

Written by `baton demo --write-transcript` ({date}). The packet ids and times differ on
every run; the checks at the end are what `make demo` asserts.

```
"""


def _free_port() -> int:
    with socket.socket() as sock:
        if sock.connect_ex(("127.0.0.1", PREFERRED_PORT)) != 0:
            return PREFERRED_PORT
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Demo:
    """The processes of one demo run and everything they printed."""

    env: dict[str, str]
    logs: Path
    lines: list[str] = field(default_factory=list)
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    def start(self, name: str, command: Sequence[str]) -> subprocess.Popen[str]:
        """A background process in its own session; its output goes to a log file."""
        log = open(self.logs / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            command,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def step(self, name: str, command: Sequence[str]) -> None:
        """A foreground step: stream its transcript lines, keep its log, fail loudly."""
        with open(self.logs / f"{name}.log", "w") as log:
            process = subprocess.Popen(
                command,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
            )
            self.processes.append(process)
            assert process.stdout is not None
            for line in process.stdout:
                print(line, end="", flush=True)
                self.lines.append(plain(line.rstrip("\n")))
            code = process.wait()
        if code != 0:
            tail = (self.logs / f"{name}.log").read_text().splitlines()[-15:]
            raise DemoFailed(f"{name} exited with {code}:\n" + "\n".join(tail))

    def stop(self, keep: Sequence[subprocess.Popen[str]] = ()) -> None:
        for process in self.processes:
            if process in keep or process.poll() is not None:
                continue
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


class DemoFailed(RuntimeError):
    """A step of the demo failed or its end state is not what the story says."""


def _wait_ready(url: str, process: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise DemoFailed(f"the API server exited:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise DemoFailed("the API server did not become ready within 30s")


def check_end_state(url: str, namespace: str, transcript: list[str]) -> list[tuple[bool, str]]:
    """What must be true once the story has run, each with a line saying so."""
    results: list[tuple[bool, str]] = []

    def expect(ok: bool, text: str) -> None:
        results.append((ok, text))

    with BatonClient(url, agent="demo-check", namespace=namespace) as baton:
        corrected = baton.recall(board.assessment_ref(553))
        expect(
            corrected.version == 2 and corrected.value["verdict"] == "maybe",
            f'listing/553/assessment is at v{corrected.version}, "{corrected.value["verdict"]}"',
        )
        expect(
            any(STALE_LINE in line for line in transcript), "the executor was warned: " + STALE_LINE
        )
        for ref, expected in ((board.assessment_ref(482), 0.84), (board.SOURCE_REF, 0.39)):
            confidence = baton.recall(ref).confidence
            expect(round(confidence, 2) == expected, f"{ref} confidence is {confidence:.2f}")
        try:
            baton.recall("listing/553/application")
            expect(False, "an application for listing/553 exists, but it was dropped")
        except BatonAPIError:
            expect(True, "no application was drafted for the dropped listing/553")
        expect(
            baton.recall("listing/482/application").value["status"] == "drafted",
            "the application for listing/482 is drafted",
        )
        packets = baton.list_handoffs().packets
        expect(
            len(packets) == 2 and all(p.state == "done" for p in packets),
            f"{len(packets)} packets, states: {', '.join(p.state for p in packets)}",
        )
        broken = baton.stats(verify=True).broken
        expect(broken == [], f"every hash chain verifies ({len(broken or [])} broken links)")
    return results


def run(keep: bool, transcript_path: Path | None) -> int:
    settings = Settings.from_env()
    namespace = demo_namespace.fresh("demo")
    started_redis = False
    if settings.redis_url:
        redis_url = settings.redis_url
    else:
        server = embedded_server(settings)
        started_redis = not server.ping()
        redis_url = server.ensure_running()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "BATON_REDIS_URL": redis_url,
        "BATON_NAMESPACE": namespace,
        "BATON_URL": url,
        COLOUR_ENV: "1" if colour_enabled() else "0",
    }
    demo = Demo(env=env, logs=Path(tempfile.mkdtemp(prefix="baton-demo-")))
    baton = [sys.executable, "-m", "baton.server.cli"]
    api: subprocess.Popen[str] | None = None
    code = 1
    started = time.monotonic()
    try:
        api = demo.start("api", [*baton, "serve", "--port", str(port)])
        _wait_ready(url, api, demo.logs / "api.log")
        print(f"Baton demo: two agents, one memory (namespace {namespace})")
        print(f"dashboard: {url}/?namespace={namespace}")
        print(f"API docs:  {url}/schema")
        where = ["--url", url, "--namespace", namespace]
        demo.step("scout", [*baton, "demo", "scout", "crawl", *where])
        demo.step(
            "executor",
            [*baton, "agent", "run", "executor", "--module", "baton.demo.executor", "--burst"],
        )
        demo.step("scout-receive", [*baton, "demo", "scout", "receive", *where])

        results = check_end_state(url, namespace, demo.lines)
        section("checks")
        for ok, text in results:
            bullet(("ok: " if ok else "FAILED: ") + text, tone="good" if ok else "bad")
        code = 0 if all(ok for ok, _ in results) else 1
        print(
            f"\n{'all checks passed' if code == 0 else 'some checks FAILED'} "
            f"in {time.monotonic() - started:.1f}s"
        )
        if transcript_path is not None:
            checks = [f"  . {'ok' if ok else 'FAILED'}: {text}" for ok, text in results]
            rule = "--- checks " + "-" * (WIDTH - len("--- checks "))
            body = "\n".join([*demo.lines, "", rule, *checks]).strip("\n")
            date = datetime.now(UTC).strftime("%Y-%m-%d")
            transcript_path.write_text(TRANSCRIPT_HEADER.format(date=date) + body + "\n```\n")
            print(f"transcript written to {transcript_path}")
    except DemoFailed as error:
        print(f"\ndemo failed: {error}\nlogs: {demo.logs}", file=sys.stderr)
    except KeyboardInterrupt:
        print("\ninterrupted; stopping what the demo started", file=sys.stderr)
        code = 130
    finally:
        kept = [api] if keep and api is not None and api.poll() is None else []
        demo.stop(keep=kept)
        if not kept:
            demo_namespace.leave(redis_url, namespace, passed=code == 0)
        if kept:
            pid = kept[0].pid
            print(
                f"\nthe API server is still running at {url} (pid {pid}), its dashboard at "
                f"{url}/?namespace={namespace}; stop it with: kill {pid}"
            )
        elif started_redis:
            embedded_server(settings).stop()
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="baton demo",
        description="The scout/executor story: two processes, one memory. "
        "'baton demo scout crawl|receive --url URL --namespace NS' runs the scout alone.",
    )
    parser.add_argument(
        "--keep", action="store_true", help="leave the API server running afterwards, to browse"
    )
    parser.add_argument(
        "--amfs",
        action="store_true",
        help="tell the story through AMFS's AgentMemory on Baton, in this process "
        "(needs the amfs extra: pip install 'baton-server[amfs]')",
    )
    parser.add_argument(
        "--langgraph",
        action="store_true",
        help="tell the story as two LangGraph graphs in two processes on Baton "
        "(needs the langgraph extra: pip install 'baton-server[langgraph]')",
    )
    parser.add_argument(
        "--write-transcript",
        nargs="?",
        const="docs/demo-transcript.md",
        default=None,
        metavar="PATH",
        help="also write the transcript (default docs/demo-transcript.md)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["scout"]:
        return scout.main(arguments[1:])
    parser = build_parser()
    args = parser.parse_args(arguments)
    path = Path(args.write_transcript) if args.write_transcript else None
    if path is not None and not path.parent.is_dir():  # checked before the demo runs
        parser.error(
            f"cannot write the transcript to {path}: {path.parent} is not a directory "
            "(outside the repository, give --write-transcript PATH)"
        )
    if args.amfs:
        try:
            from baton.demo.amfs_story import run as run_through_amfs
        except ImportError as missing:
            parser.error(
                f"--amfs needs the amfs extra ({missing}): pip install 'baton-server[amfs]'"
            )
        return run_through_amfs()
    if args.langgraph:
        try:
            from baton.demo.langgraph_story import run as run_through_langgraph
        except ImportError as missing:
            parser.error(
                f"--langgraph needs the langgraph extra ({missing}): "
                "pip install 'baton-server[langgraph]'"
            )
        return run_through_langgraph()
    return run(args.keep, path)


if __name__ == "__main__":
    sys.exit(main())
