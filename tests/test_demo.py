"""`make demo`: the scout/executor story end to end, and the compose file's services."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import yaml

from baton.demo.scout import build_parser as scout_parser
from baton.server.cli import build_parser
from baton.server.runtime.embedded import EmbeddedServer
from tests.conftest import REPO

KEY_LINES = [
    "--- 1. pick up whatever is waiting",
    "  . 4 pinned record versions arrived with the packet",
    "  . stale: listing/553/assessment was pinned at v1, now at v2",
    "--- 3. re-read anything the warning touched",
    "  . dropping listing/553 - acting on the pinned v1 would be wrong",
    "--- 5. report what actually happened",
    "  . success on listing/482/assessment: confidence 80% -> 84%",
    "  . failure on source/boards-example/rate-limit: confidence 60% -> 39%",
    "all checks passed",
]


def run_demo(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BATON_DATA_DIR": str(data_dir)}
    env.pop("BATON_REDIS_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "baton.server.cli", "demo", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def port_of(output: str) -> int:
    match = re.search(r"dashboard: http://127\.0\.0\.1:(\d+)/", output)
    assert match, output
    return int(match.group(1))


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_demo_tells_the_story_checks_it_and_cleans_up(tmp_path: Path) -> None:
    """On a machine with nothing running, the demo starts Redis and the API, passes its own
    checks, writes the transcript, and leaves no server behind."""
    transcript = tmp_path / "transcript.md"
    result = run_demo(tmp_path / "data", "--write-transcript", str(transcript))

    assert result.returncode == 0, result.stdout + result.stderr
    for line in KEY_LINES:
        assert line in result.stdout
    assert "\x1b[" not in result.stdout  # no colour when not on a terminal
    story = [line for line in result.stdout.splitlines() if line.startswith(("---", "  ", "    "))]
    assert len(story) > 30
    assert all(len(line) <= 80 for line in story)
    written = transcript.read_text()
    assert "stale: listing/553/assessment was pinned at v1, now at v2" in written
    assert "ok: every hash chain verifies" in written
    assert not listening(port_of(result.stdout))
    assert not EmbeddedServer(tmp_path / "data").ping()


@pytest.mark.slow
def test_demo_reuses_a_running_server_and_runs_again(tmp_path: Path) -> None:
    """With the embedded server already up, the demo uses it, can run twice (a fresh
    namespace each time), leaves the server it did not start running, and leaves nothing
    of its runs in it: no key, queue or job of their namespaces, which no longer count
    among the server's."""
    server = EmbeddedServer(tmp_path / "data")
    store = redis.Redis.from_url(server.ensure_running())
    try:
        first, second = run_demo(tmp_path / "data"), run_demo(tmp_path / "data")
        assert first.returncode == 0, first.stdout + first.stderr
        assert second.returncode == 0, second.stdout + second.stderr
        namespaces = {
            re.search(r"namespace (demo-[\w-]+)", r.stdout).group(1)  # type: ignore[union-attr]
            for r in (first, second)
        }
        assert len(namespaces) == 2
        assert server.ping()
        for namespace in namespaces:
            assert list(store.scan_iter(f"*{namespace}*")) == []
        assert store.smembers("baton:namespaces") == set()
    finally:
        server.stop()


def test_the_story_told_through_amfs_sees_the_stale_pin_and_cleans_up(tmp_path: Path) -> None:
    """``baton demo --amfs``: AMFS agents on Baton; the executor is warned about the pin
    that moved (which AMFS alone would have served silently), drops listing/553, passes
    every check, and stops the embedded server it started."""
    result = run_demo(tmp_path / "data", "--amfs")
    assert result.returncode == 0, result.stdout + result.stderr
    for line in (
        "  . stale: listing/553/assessment was pinned at v1, now at v2",
        "  . adapter.read_at_version v1: apply; memory.read v2: maybe",
        "  . dropping listing/553",
        "  . ok: listing/482/assessment confidence is 0.84",
        "all checks passed",
    ):
        assert line in result.stdout
    assert not EmbeddedServer(tmp_path / "data").ping()


@pytest.mark.slow
def test_the_story_told_by_two_langgraph_graphs_acts_on_the_current_fact(
    tmp_path: Path,
) -> None:
    """``baton demo --langgraph``: two graphs in two processes share one Baton; the
    executor's graph is warned about the assessment that moved after the handoff, re-reads
    it through BatonStore, drops listing 553, and both threads' histories verify."""
    result = run_demo(tmp_path / "data", "--langgraph")
    assert result.returncode == 0, result.stdout + result.stderr
    for line in (
        "  . stale: langgraph/listing/553/assessment was pinned at v1, now at v2",
        "  . store.get(('listing', '553'), 'assessment'): maybe",
        "  . dropping listing/553",
        "  . store.put(('listing', '482'), 'application'): drafted",
        "  . ok: thread executor: 5 checkpoints verify",
        "all checks passed",
    ):
        assert line in result.stdout
    assert not EmbeddedServer(tmp_path / "data").ping()


def test_the_amfs_story_without_the_extra_says_what_to_install() -> None:
    """Without the amfs package, ``baton demo --amfs`` exits 2 with the install line."""
    without_amfs = (
        "import sys; sys.modules['amfs'] = None; from baton.demo.run import main; main(['--amfs'])"
    )
    result = subprocess.run(
        [sys.executable, "-c", without_amfs], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "pip install 'baton-server[amfs]'" in result.stderr.splitlines()[-1]


def test_compose_services_run_real_baton_commands() -> None:
    """Without an engine (make compose-check runs them on one): every Baton service of
    compose.yaml runs a command baton accepts, on one Redis, with a token file and never in
    open mode, and the API replicas are published only through the load balancer, which
    health-checks each; compose.cluster.yaml moves the same services' data to the
    cluster."""
    services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    assert set(services) == {"redis", "tokens", "api", "lb", "worker", "executor", "scout"}
    assert services["api"]["scale"] >= 2 and services["api"]["healthcheck"]
    assert "ports" not in services["api"]  # clients reach the replicas through the balancer
    balancer = " ".join(services["lb"]["command"])
    assert "server-template api" in balancer and "check" in balancer and services["lb"]["ports"]
    for name in ("tokens", "api", "worker", "executor", "scout"):
        service = services[name]
        assert service["environment"]["BATON_REDIS_URL"] == "redis://redis:6379/0"
        command = service["command"]
        assert command[0] == "baton" and "--insecure-open" not in command
        if command[1:3] == ["demo", "scout"]:
            scout_parser().parse_args(command[3:])
        else:
            build_parser().parse_args(command[1:])
        if name != "tokens":
            assert service["environment"]["BATON_TOKEN_FILE"] == "/run/baton/admin-token"
    cluster = yaml.safe_load((REPO / "compose.cluster.yaml").read_text())["services"]
    for name in ("tokens", "api", "worker", "executor", "scout"):
        assert cluster[name]["environment"]["BATON_REDIS_URL"].startswith("redis+cluster://")
        assert cluster[name]["environment"]["BATON_QUEUE_URL"] == "redis://redis:6379/0"


def test_a_transcript_path_that_cannot_be_written_is_refused_before_the_demo_runs(
    tmp_path: Path,
) -> None:
    """Outside the repository the default transcript path has no docs/ folder: the demo
    refuses at once, saying what to pass, rather than failing after its whole run."""
    done = subprocess.run(
        [sys.executable, "-m", "baton.server.cli", "demo", "--write-transcript"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--write-transcript PATH" in done.stderr and "Traceback" not in done.stderr
