"""The embedded Valkey server: shared by processes, crash-safe, persistent, stoppable."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import psutil
import pytest
import redis

from baton.server.runtime.embedded import EmbeddedServer
from tests.conftest import run_baton

START_AND_REPORT = """
import sys
from pathlib import Path
from baton.server.runtime.embedded import EmbeddedServer
server = EmbeddedServer(Path(sys.argv[1]))
server.ensure_running()
print(server.pid())
"""


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A private data dir whose server is stopped after the test, whatever happened."""
    path = tmp_path / "data"
    yield path
    EmbeddedServer(path).stop()


def baton(*args: str, data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``baton ARGS`` on the embedded server of ``data_dir`` (never a configured Redis)."""
    return run_baton(
        *args, env={"BATON_DATA_DIR": str(data_dir), **env}, without=("BATON_REDIS_URL",)
    )


def servers_for(data_dir: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if "valkey" in (process.info["name"] or "") and str(data_dir) in cmdline:
            found.append(process)
    return found


def write_numbers(server: EmbeddedServer, count: int) -> None:
    client = server.client()
    for i in range(count):
        client.set(f"n:{i}", i)
    client.close()


def test_concurrent_processes_start_exactly_one_server(data_dir: Path) -> None:
    """Four processes racing to start the server all end up on the same one."""
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", START_AND_REPORT, str(data_dir)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    pids = {racer.communicate(timeout=60)[0].strip() for racer in racers}
    assert len(pids) == 1
    assert [process.pid for process in servers_for(data_dir)] == [int(pids.pop())]


def test_server_outlives_the_process_that_started_it(data_dir: Path) -> None:
    """The process that started the server exits; another process still reads its data."""
    script = START_AND_REPORT + "server.client().set('left-by', 'first process')\n"
    subprocess.run([sys.executable, "-c", script, str(data_dir)], check=True, timeout=60)

    server = EmbeddedServer(data_dir)
    assert server.ping()
    assert server.client().get("left-by") == b"first process"


def test_crashed_server_is_detected_and_restarted_with_its_data(data_dir: Path) -> None:
    """After SIGKILL the stale pid file and socket are cleared, a new server starts, and
    every acknowledged write is still there (append-only file)."""
    server = EmbeddedServer(data_dir)
    server.ensure_running()
    write_numbers(server, 500)
    old_pid = server.pid()
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)
    psutil.Process(old_pid).wait(10) if psutil.pid_exists(old_pid) else None
    assert not server.ping()
    assert server.socket_path.exists()  # left behind by the crash

    server.ensure_running()
    assert server.pid() not in (None, old_pid)
    assert server.client().dbsize() == 500


def test_down_then_start_keeps_every_write(data_dir: Path) -> None:
    """`baton down` stops the server cleanly; the next start finds every write."""
    server = EmbeddedServer(data_dir)
    server.ensure_running()
    write_numbers(server, 300)

    result = baton("down", data_dir=data_dir)
    assert result.returncode == 0
    assert "stopped" in result.stdout
    assert servers_for(data_dir) == []
    assert not server.socket_path.exists()
    assert "no embedded server running" in baton("down", data_dir=data_dir).stdout

    server.ensure_running()
    assert server.client().mget([f"n:{i}" for i in range(300)]) == [
        str(i).encode() for i in range(300)
    ]


def test_status_says_what_runs_where(data_dir: Path) -> None:
    """`baton status` reports the pid, socket, data dir and durability setting."""
    stopped = json.loads(baton("status", data_dir=data_dir).stdout)
    assert (stopped["embedded"], stopped["running"]) == (True, False)

    EmbeddedServer(data_dir).ensure_running()
    report = json.loads(baton("status", data_dir=data_dir).stdout)
    assert report["running"] is True
    assert report["pid"] == servers_for(data_dir)[0].pid
    assert report["socket"] == str(data_dir / "valkey.sock")
    assert report["appendfsync"] == "everysec"


def test_appendfsync_always_is_configurable(data_dir: Path) -> None:
    """BATON_APPENDFSYNC=always starts the server fsyncing every write."""
    assert baton("stats", data_dir=data_dir, BATON_APPENDFSYNC="always").returncode == 0
    assert json.loads(baton("status", data_dir=data_dir).stdout)["appendfsync"] == "always"
    refused = baton("stats", data_dir=data_dir, BATON_APPENDFSYNC="sometimes")
    assert refused.returncode != 0
    assert "BATON_APPENDFSYNC must be one of always, everysec, no" in refused.stderr


def test_configured_redis_url_starts_nothing(data_dir: Path, redis_url: str) -> None:
    """With BATON_REDIS_URL set, status reports that server (and what its search needs) and no
    embedded one is started."""
    report = json.loads(baton("status", data_dir=data_dir, BATON_REDIS_URL=redis_url).stdout)
    assert report == {
        "baton_version": version("baton-server"),
        "redis": redis_url,
        "embedded": False,
        "reachable": True,
        "reindex_needed": [],
        "vectors": "off (BATON_VECTORS=off)",
    }
    assert not data_dir.exists()


def test_a_long_data_dir_path_gets_a_short_socket(tmp_path: Path) -> None:
    """Unix socket paths are limited to ~100 bytes; a deep data dir still works."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    server = EmbeddedServer(deep)
    try:
        server.ensure_running()
        assert len(str(server.socket_path)) <= 100
        assert redis.Redis.from_url(server.url).ping()
    finally:
        server.stop()


def test_a_foreign_socket_at_the_fallback_path_is_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a long data dir the socket lives in a private runtime dir; a socket there that
    another user owns is refused, never connected to, and nothing is started over it."""
    import socket

    from baton.server.runtime.embedded import EmbeddedServerError

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    server = EmbeddedServer(tmp_path / ("d" * 60) / ("e" * 60))
    server.socket_path.parent.mkdir(parents=True, mode=0o700)
    squatter = socket.socket(socket.AF_UNIX)
    squatter.bind(str(server.socket_path))
    squatter.listen()
    os.chown(server.socket_path, 12345, 12345)
    try:
        with pytest.raises(EmbeddedServerError, match="belongs to uid 12345"):
            server.ensure_running()
        squatter.setblocking(False)
        with pytest.raises(BlockingIOError):
            squatter.accept()  # nobody connected
    finally:
        squatter.close()
    assert server.pid() is None


def test_data_dirs_are_private(tmp_path: Path) -> None:
    """An existing data dir readable by others is tightened to 0700; one owned by another
    user, or a path that cannot be a directory, is refused with a message (no traceback)."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    server = EmbeddedServer(shared)
    try:
        server.ensure_running()
        assert oct(shared.stat().st_mode & 0o777) == "0o700"
    finally:
        server.stop()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.chown(foreign, 12345, 12345)
    refused = baton("stats", data_dir=foreign)
    assert refused.returncode == 2 and "belongs to uid 12345" in refused.stderr
    broken = baton("stats", data_dir=Path("/dev/null/baton"))
    assert broken.returncode == 2 and "Traceback" not in broken.stderr
    assert "cannot use /dev/null/baton" in broken.stderr


def fill_until_refused(server: EmbeddedServer, disk: Path) -> int:
    """Fill ``disk`` and keep writing until the server refuses a write (``MISCONF``);
    the number of writes it acknowledged on the way."""
    client = server.client()
    with open(disk / "filler", "wb") as out, contextlib.suppress(OSError):
        out.write(b"\0" * 8 * 2**20)  # more than the disk has left
    acknowledged = 0
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            try:
                client.set(f"full:{acknowledged}", "x" * 4000)
            except redis.ResponseError as error:
                assert "MISCONF" in str(error)
                return acknowledged
            acknowledged += 1
            time.sleep(0.01)
    finally:
        client.close()
    raise AssertionError("the server never refused a write on a full disk")


def test_a_server_on_a_full_disk_is_alive_and_never_replaced(small_disk: Path) -> None:
    """A server that refuses writes (MISCONF: its append-only file cannot be written) still
    answers: it is never taken for dead, restarted or killed (its memory holds acknowledged
    writes); `baton status` says "disk full"; once space returns it takes writes again
    without a restart, and every acknowledged write is there."""
    server = EmbeddedServer(small_disk)
    server.ensure_running()
    pid = server.pid()
    acknowledged = fill_until_refused(server, small_disk)

    assert server.ping()
    assert server.revive() is False
    server.ensure_running(timeout=2)
    assert server.pids() == [pid]
    report = json.loads(baton("status", data_dir=small_disk).stdout)
    assert report["running"] is True
    assert report["condition"].startswith("disk full")

    (small_disk / "filler").unlink()
    client = server.client()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            client.set("after", 1)
            break
        except redis.ResponseError:
            time.sleep(0.2)
    assert client.get("after") == b"1"
    assert server.pids() == [pid]
    assert server.status()["condition"] == "ok"
    server.stop()
    server.ensure_running()
    stored = server.client().mget([f"full:{n}" for n in range(acknowledged)])
    assert None not in stored


def test_no_restart_while_another_process_holds_the_start_lock(data_dir: Path) -> None:
    """The supervisor's check skips its round while another process holds the data dir's
    start lock (it may be starting or checking the server), and restarts a dead server once
    the lock is free."""
    server = EmbeddedServer(data_dir)
    server.ensure_running()
    old_pid = server.pid()
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)
    psutil.Process(old_pid).wait(10) if psutil.pid_exists(old_pid) else None

    with open(data_dir / "valkey.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert server.revive() is False
        assert server.pids() == []
        fcntl.flock(held, fcntl.LOCK_UN)
    assert server.revive() is True
    assert server.pids() not in ([], [old_pid])


def test_a_server_whose_socket_and_pid_file_vanished_is_not_doubled(data_dir: Path) -> None:
    """A live server whose socket and pid file were removed is still found (by its data
    dir): it is stopped cleanly before another starts, so two servers never share one
    append-only file, and every write survives."""
    server = EmbeddedServer(data_dir)
    server.ensure_running()
    write_numbers(server, 200)
    old_pid = server.pid()
    server.socket_path.unlink()
    server.pid_path.unlink()

    server.ensure_running(timeout=1)
    assert len(servers_for(data_dir)) == 1
    assert server.pid() != old_pid
    assert server.client().dbsize() == 200


def test_the_embedded_servers_memory_limit_defaults_to_half_the_machines(
    data_dir: Path,
) -> None:
    """Without BATON_MAXMEMORY the embedded server may hold half of this machine's memory
    (then refuses writes, never evicts)."""
    started = run_baton(
        "stats",
        env={"BATON_DATA_DIR": str(data_dir)},
        without=("BATON_REDIS_URL", "BATON_MAXMEMORY"),
    )
    assert started.returncode == 0, started.stderr
    client = EmbeddedServer(data_dir).client()
    held = int(client.config_get("maxmemory")["maxmemory"])
    client.close()
    assert held == psutil.virtual_memory().total // 2


def test_a_full_embedded_server_refuses_writes_and_keeps_every_acknowledged_one(
    data_dir: Path,
) -> None:
    """With BATON_MAXMEMORY reached, the embedded server refuses writes (never evicts):
    every write it acknowledged is still there, `baton status` says it is full and why,
    and a Baton write fails with one line naming it."""
    assert baton("stats", data_dir=data_dir, BATON_MAXMEMORY="4mb").returncode == 0
    server = EmbeddedServer(data_dir)
    client = server.client()
    acknowledged = 0
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for n in range(10_000):
            client.set(f"filler:{n}", b"x" * 10_000)
            acknowledged += 1
    assert 0 < acknowledged < 10_000
    assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    assert len(client.keys("filler:*")) == acknowledged
    client.close()
    report = json.loads(baton("status", data_dir=data_dir).stdout)
    assert (
        report["condition"].startswith("memory full") and "BATON_MAXMEMORY" in report["condition"]
    )
    refused = baton("token", "add", "--agent", "late", data_dir=data_dir)
    assert refused.returncode != 0 and "out of memory" in refused.stderr.lower()
    assert len(refused.stderr.strip().splitlines()) == 1
