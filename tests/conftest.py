"""Shared fixtures: one real embedded Valkey server per test run, flushed before each test,
and a real ``baton serve`` process for the HTTP tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import msgspec
import pytest
import redis
import structlog
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from baton.server.model.identity import Caller, Credential
from baton.server.model.models import HandoffInput
from baton.server.runtime.connection import async_redis, is_cluster
from baton.server.runtime.embedded import EmbeddedServer, valkey_binary
from baton.server.runtime.settings import Settings
from baton.server.stores.backend import Backend, Namespace, open_backend
from baton.server.stores.records import RecordStore
from baton.server.stores.tokens import TokenStore

if TYPE_CHECKING:
    from baton.agents import BatonClient
    from baton.server.stores.handoffs import HandoffStore

REPO = Path(__file__).resolve().parent.parent
# Every process the suite starts inherits this mark, so one left running is found.
RUN_MARK = f"BATON_TEST_RUN={secrets.token_hex(8)}"
os.environ["BATON_TEST_RUN"] = RUN_MARK.partition("=")[2]
# Nothing the suite starts keeps files in the user's own data dir (~/.local/share/baton): a
# process given no BATON_DATA_DIR (a hook's spool, say) uses this run's own.
os.environ["XDG_DATA_HOME"] = RUN_DATA_HOME = tempfile.mkdtemp(prefix="baton-tests-")
# Apps built in this process keep this logging set-up (``configure_logging`` leaves a
# configured structlog alone): loggers are never cached, so ``capture_logs`` sees every
# record, whichever test first used a logger.
structlog.configure(cache_logger_on_first_use=False)


def pytest_configure(config: pytest.Config) -> None:
    """Every Lua script, in this process and in every Baton process the tests start, refuses
    a command on a key it was not given (``scripts.py``): the whole suite checks that
    scripts declare their keys. Set here, not on import: the benchmarks import this module
    and must measure Baton without the check (and with vectors as installed)."""
    os.environ["BATON_LUA_KEY_CHECK"] = "1"
    # Search is BM25 alone unless a test turns vectors on (tests/test_vectors.py): the
    # suite's rankings and scores are BM25's, whether or not the vectors extra is installed.
    os.environ["BATON_VECTORS"] = "off"


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """The embedded server every test shares; stopped when the run ends."""
    server = EmbeddedServer(tmp_path_factory.mktemp("valkey"))
    server.ensure_running()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_url(embedded: EmbeddedServer) -> str:
    return embedded.url


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs as the data dir, so the disk can really fill up (needs root)."""
    mount = tmp_path / "disk"
    mount.mkdir(mode=0o700)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert mounted.returncode == 0, f"this test mounts a tmpfs (as root): {mounted.stderr}"
    try:
        yield mount
    finally:
        EmbeddedServer(mount).stop()
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def sync_redis(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def written_keys(client: redis.Redis) -> list[bytes]:
    """Every key but the registration the shared API's RQ scheduler renews in the background
    (``rq:scheduler:<id>``, at any moment): what a test that wrote nothing must find none of."""
    return [key for key in client.keys("*") if not key.startswith(b"rq:scheduler:")]


OURS = ("multiprocessing.resource_tracker", "multiprocessing.spawn")


def started_by_this_run() -> dict[int, str]:
    """The live processes (by pid, with their command line) started by this test run,
    found by the mark in their environment; none where there is no /proc. (A process that
    rewrites its title, as valkey-server does, overwrites its environment and is not seen.)"""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environment = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_bytes().rpartition(b")")[2].split()[0]
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError):  # gone meanwhile, or another user's
            continue
        if RUN_MARK.encode() in environment and state not in (b"Z", b"X"):
            found[int(entry.name)] = command.decode(errors="replace")[:200]
    # A Baton process's analysis process (baton.server.retrieval.analysis) and multiprocessing's
    # resource tracker for it live as long as that process (this one, or a fixture's
    # server), by design: they are left behind only once their parent is gone.
    return {pid: command for pid, command in found.items() if not _helper_of_a_live(pid, command)}


def _helper_of_a_live(pid: int, command: str) -> bool:
    with contextlib.suppress(OSError, ValueError):
        parent = int(Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[1])
        alive = parent == os.getpid() or (parent != 1 and Path(f"/proc/{parent}").exists())
        return alive and any(mark in command for mark in OURS)
    return False


def stop_left_behind(before: dict[int, str]) -> list[str]:
    """The processes started since ``before`` that are still running after a few seconds'
    grace, killed (so they cannot touch later tests); their command lines."""
    deadline = time.monotonic() + 10
    while (now := started_by_this_run()).keys() - before.keys() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: command for pid, command in now.items() if pid not in before}
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if left:  # what those leave in turn (a killed server's spawned workers, now orphans)
        deadline = time.monotonic() + 2
        while (now := started_by_this_run()).keys() - before.keys() - left.keys():
            if time.monotonic() > deadline:
                for pid in now.keys() - before.keys() - left.keys():
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                    left[pid] = now[pid]
                break
            time.sleep(0.1)
    return list(left.values())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test leaves no process it started running: such a process could write into a later
    test's store (an orphaned RQ scheduler once did). What is left is killed, and fails a
    test that passed. Processes of fixtures, started before the test's call, are left to
    their fixtures."""
    before = started_by_this_run()
    try:
        result = yield
    except BaseException:
        stop_left_behind(before)
        raise
    if left := stop_left_behind(before):
        raise AssertionError(f"processes left running (now killed): {left}")
    return result


def valkeys_working_in(roots: list[Path]) -> dict[int, str]:
    """The running valkey-servers whose working folder (their data dir) is inside one of
    ``roots``, by pid, with their command line."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if (entry / "comm").read_text().strip() != "valkey-server":
                continue
            folder = Path(os.readlink(entry / "cwd"))
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, UnicodeDecodeError):  # gone meanwhile
            continue
        if any(folder.is_relative_to(root) for root in roots):
            found[int(entry.name)] = command.strip()
    return found


@pytest.fixture(scope="session", autouse=True)
def _no_valkey_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The run leaves no Valkey running. A valkey-server rewrites its title over its
    environment, so the run mark (``pytest_runtest_call``) cannot see one; once every
    fixture is done, one still working in a folder of this run's was left by a test or a
    fixture: it is killed, and the run fails."""
    yield
    roots = [tmp_path_factory.getbasetemp().resolve(), Path(RUN_DATA_HOME).resolve()]
    deadline = time.monotonic() + 10  # a server shutting down as its fixture asked
    while (left := valkeys_working_in(roots)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"Valkey servers left running by this run (now killed): {left}"


@pytest.fixture(autouse=True)
def _own_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's processes default to a data dir of the test's own (a hook's spool, say),
    so nothing one test leaves there reaches another."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture(autouse=True)
def _flush(request: pytest.FixtureRequest) -> None:
    """Every test that touches Redis starts from an empty server."""
    if "redis_url" in request.fixturenames:
        client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
        client.flushdb()  # db 0: the auth tests keep their own tokens in db 1
        client.close()


@pytest.fixture(scope="session")
def cluster_ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    """A real 3-master Redis Cluster from the embedded binary, on loopback ports."""
    server_binary = valkey_binary()
    cli = str(Path(server_binary).with_name("valkey-cli"))
    ports = cluster_ports_free(3)
    base = tmp_path_factory.mktemp("cluster")
    nodes = []
    for port in ports:
        (base / str(port)).mkdir()
        nodes.append(
            subprocess.Popen(
                [
                    server_binary,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(base / str(port) / "nodes.conf"),
                    "--dir",
                    str(base / str(port)),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    try:
        for port in ports:
            wait_for_redis(redis.Redis(port=port, retry=Retry(NoBackoff(), 0)))
        subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while any(cluster_state(p) != "ok" for p in ports):
            assert time.monotonic() < deadline, "the cluster did not become ready"
            time.sleep(0.1)
        yield ports
    finally:
        for node in nodes:
            node.terminate()
            node.wait(10)


def cluster_state(port: int) -> str:
    info = redis.Redis(port=port, decode_responses=True).execute_command("CLUSTER INFO")
    return str(info.get("cluster_state") if isinstance(info, dict) else info)


def cluster_ports_free(count: int) -> list[int]:
    """Ports whose cluster bus port (port + 10000) is free too, so both fit below 65536."""
    found: list[int] = []
    for port in random.sample(range(20000, 30000), 200):
        if len(found) == count:
            break
        try:
            with socket.socket() as one, socket.socket() as bus:
                one.bind(("127.0.0.1", port))
                bus.bind(("127.0.0.1", port + 10000))
            found.append(port)
        except OSError:
            continue
    return found


def wait_for_redis(client: redis.Redis) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            return
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "redis did not start"
            time.sleep(0.05)


@pytest.fixture(params=["standalone", "cluster"])
def data_url(request: pytest.FixtureRequest, redis_url: str) -> str:
    """The store tests run twice: on the embedded server and on a real Redis Cluster."""
    if request.param == "standalone":
        return redis_url
    ports = request.getfixturevalue("cluster_ports")
    for port in ports:
        redis.Redis(port=port).flushall()
    return f"redis+cluster://127.0.0.1:{ports[0]}"


@pytest.fixture
def data_redis(data_url: str) -> Iterator[redis.Redis]:
    """A blocking client on the store's own Redis (cluster-aware), for tampering in tests."""
    client: redis.Redis = (
        RedisCluster.from_url(data_url.replace("+cluster", ""))
        if is_cluster(data_url)  # type: ignore[assignment]
        else redis.Redis.from_url(data_url)
    )
    yield client
    client.close()


@pytest.fixture
async def backend(data_url: str) -> AsyncIterator[Backend]:
    """A backend on the data server, wired like every Baton process (no queue dispatch)."""
    async with open_backend(Settings(redis_url=data_url), dispatch=False) as opened:
        yield opened


@pytest.fixture
def ns(backend: Backend) -> Namespace:
    return backend.namespace("default")


@pytest.fixture
def store(ns: Namespace) -> RecordStore:
    return ns.records


def handoff_input(**fields: Any) -> HandoffInput:
    """A packet to hand off, decoded as the operation decodes it (pins as plain objects)."""
    return msgspec.convert(fields, HandoffInput)


def as_agent(
    agent: str, *, admin: bool = False, session: str | None = None, namespace: str = "default"
) -> Caller:
    """A caller holding ``agent``'s token (an admin token with ``admin``)."""
    return Caller(
        agent=agent,
        namespace=namespace,
        session=session,
        credential=Credential("token", agent=agent, admin=admin),
    )


def run_baton(
    *args: str,
    env: dict[str, str] | None = None,
    without: tuple[str, ...] = (),
    cwd: Path = REPO,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``baton ARGS`` in a process of its own: this process's environment without the
    names in ``without``, then ``env``; its output captured as text, any exit code."""
    environment = {name: value for name, value in os.environ.items() if name not in without}
    return subprocess.run(
        [sys.executable, "-m", "baton.server.cli", *args],
        env={**environment, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        check=False,
    )


def set_up_in(host: str, project: Path, home: Path, api_url: str) -> None:
    """``baton setup HOST --project PROJECT`` for a user whose home is ``home``, pointed at
    the Baton serving ``api_url``."""
    done = run_baton(
        "setup", host, "--project", str(project), env={"HOME": str(home), "BATON_URL": api_url}
    )
    assert done.returncode == 0, done.stderr


def shop_with_hooks(host: str, home: Path, api_url: str, hooks_file: str) -> tuple[Path, Any]:
    """A project ``shop`` (with ``src/``) in ``home`` that ``host`` is set up for, pointed at
    the Baton serving ``api_url``, and the hooks setup wrote into its ``hooks_file``."""
    project = home / "shop"
    (project / "src").mkdir(parents=True)
    set_up_in(host, project, home, api_url)
    return project, json.loads((project / hooks_file).read_text())["hooks"]


def fire_hook(
    command: list[str], payload: dict[str, Any], project: Path, home: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """A host's hook ``command`` run as the host runs it, in ``project`` for a user whose home
    is ``home``, with ``payload`` on stdin and none of this process's Baton settings (only
    what setup wrote into the command reaches it); it must exit 0 and print no error."""
    quiet = {k: v for k, v in os.environ.items() if not k.startswith(("BATON_", "AGENT_ID"))}
    done = subprocess.run(
        command,
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=project,
        env={**quiet, "HOME": str(home)},
    )
    assert (done.returncode, done.stderr) == (0, ""), (payload.get("hook_event_name"), done)
    return done


def additional_context(started: subprocess.CompletedProcess[str]) -> str:
    """The context a SessionStart hook gave the host (Claude Code's answer shape)."""
    return str(json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"])


def assert_resumed(
    started: subprocess.CompletedProcess[str],
    api_url: str,
    previous: str,
    agent: str,
    files: list[Path],
) -> None:
    """A SessionStart hook's answer names the ``previous`` session of project ``shop`` and
    the first file it changed, and Baton holds that session as completed by ``agent``, with
    ``files``."""
    context = additional_context(started)
    assert previous in context and f"src/{files[0].name}" in context
    with httpx.Client(base_url=api_url, timeout=10) as http:
        session = http.get(f"/v1/sessions/{previous}").json()
    assert (session["agent"], session["project"], session["status"]) == (agent, "shop", "completed")
    assert session["files"] == [str(file) for file in files]


def issue(url: str, agent: str, **options: Any) -> str:
    """A new token's secret for ``agent``, written straight into the store at ``url``."""

    async def add() -> str:
        client = async_redis(url)
        try:
            return (await TokenStore(client).add(agent, **options)).secret
        finally:
            await client.aclose()

    return asyncio.run(add())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_http(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited early:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"server did not come up:\n{log.read_text()}")


@contextmanager
def running_server(
    redis_url: str, log: Path, *options: str, port: int | None = None, **env: str
) -> Iterator[str]:
    """A real ``baton serve`` process (with ``options``) on ``port`` or a free loopback
    port; yields its URL."""
    port = port or free_port()
    # The server sweeps by itself; tests that compare the store before and after a request
    # must not see a scheduled checkpoint land in between (tests take theirs explicitly).
    environment = {
        **os.environ,
        "BATON_REDIS_URL": redis_url,
        "BATON_CHECKPOINT_INTERVAL": "off",
        # Notices add events to the store a test checks: tests that want them say so.
        "BATON_NOTICES": "off",
        **env,
    }
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "baton.server.cli", "serve", "--port", str(port), *options],
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(url, process, log)
        yield url
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="session")
def api_url(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API every HTTP test shares (values limited to 64 KiB to test the limit). It does
    not sweep on a schedule: its sweeps would land in the middle of in-process tests on the
    same Redis that sweep themselves and check what their sweep expired."""
    log = tmp_path_factory.mktemp("api") / "serve.log"
    options = {"BATON_MAX_VALUE_BYTES": "65536", "BATON_SWEEP_SECONDS": "86400"}
    with running_server(redis_url, log, **options) as url:
        yield url


@pytest.fixture
def http(api_url: str, redis_url: str) -> Iterator[httpx.Client]:
    """An HTTP client for the running API (the store is flushed before each test)."""
    with httpx.Client(base_url=api_url, headers={"X-Baton-Agent": "tester"}) as client:
        yield client


@pytest.fixture
async def dispatching_backend(data_url: str, redis_url: str) -> AsyncIterator[Backend]:
    """A backend that also enqueues RQ jobs, as the API server does: RQ on the plain server,
    sharing the data client when the data is there too."""
    from baton.server.runtime.settings import HandoffPolicy

    settings = Settings(
        redis_url=data_url, queue_url=redis_url, handoffs=HandoffPolicy(retry_intervals=(0,))
    )
    async with open_backend(settings) as opened:
        yield opened


@pytest.fixture
def handoffs(dispatching_backend: Backend) -> HandoffStore:
    return dispatching_backend.namespace("default").handoffs


def baton_process(
    *args: str, redis_url: str, api_url: str | None = None, **env: str
) -> subprocess.Popen[str]:
    """Start ``baton ARGS`` as its own process against the test server."""
    environment = {
        **os.environ,
        "BATON_REDIS_URL": redis_url,
        "BATON_RETRY_INTERVALS": "0",
        **({"BATON_URL": api_url} if api_url else {}),
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "baton.server.cli", *args],
        env=environment,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.fixture
def scout(api_url: str, redis_url: str) -> Iterator[BatonClient]:
    """The Python client acting as agent 'scout' against the running API."""
    from baton.agents import BatonClient

    with BatonClient(api_url, agent="scout") as client:
        yield client


@pytest.fixture
def executor(api_url: str, redis_url: str) -> Iterator[BatonClient]:
    """The Python client acting as agent 'executor' against the running API."""
    from baton.agents import BatonClient

    with BatonClient(api_url, agent="executor") as client:
        yield client
