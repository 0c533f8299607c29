"""``baton doctor``: check a setup end to end and say what to fix, one line per finding.

It checks what an agent's use of Baton depends on, in order: the store (``BATON_REDIS_URL``,
or the embedded server of the data dir), the API the hooks and HTTP clients reach
(``BATON_URL``) and the token they send (``BATON_TOKEN``), the hook events waiting in the
data dir's spools for a Baton to take them, then each agent host's files
(``baton setup``): that the MCP server they name starts and lists its tools, as the host
would start it, and that the hook commands they name exist. Each finding is
``ok``, ``warn`` (works, but maybe not as meant) or ``FAIL`` (and what to do).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal, TextIO

import anyio
import httpx
import redis
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from baton.agents import codex_trust
from baton.agents.host_setup import (
    HOOKED,
    HOSTS,
    MCP_FILES,
    Host,
    baton_group,
    command_words,
    mcp_config,
    read_config,
)
from baton.agents.spool import waiting
from baton.server.model.endpoint import base_url_of, token_of
from baton.server.runtime.connection import sync_redis
from baton.server.runtime.embedded import EmbeddedServer
from baton.server.runtime.settings import Settings

Level = Literal["ok", "warn", "FAIL"]
TIMEOUT = 3.0
START_SECONDS = 30.0  # for a host's MCP server to start and list its tools


@dataclass(frozen=True)
class Finding:
    level: Level
    text: str

    def __str__(self) -> str:
        return f"{self.level:<4} {self.text}"


def examine(
    settings: Settings, environ: Mapping[str, str], home: Path, project: Path
) -> Iterator[Finding]:
    """Every finding, in the order a user would fix them."""
    yield Finding("ok", f"baton {version('baton-server')}")
    yield from _store(settings)
    yield from _api(environ)
    yield from _spools(settings)
    unset = []
    for host in HOSTS:
        found = list(_host(host, home, project))
        unset += [] if found else [host]
        yield from found
    if len(unset) == len(HOSTS):
        yield Finding("warn", "no agent host is set up here: `baton setup --list` names them")
    elif unset:
        yield Finding("ok", f"not set up here (`baton setup HOST`): {', '.join(unset)}")


def _store(settings: Settings) -> Iterator[Finding]:
    if settings.redis_url:
        client = sync_redis(settings.redis_url)
        try:
            client.ping()
        except redis.exceptions.RedisError as error:
            yield Finding(
                "FAIL",
                f"cannot reach Redis at BATON_REDIS_URL ({error}): start it or fix the URL",
            )
        else:
            yield Finding("ok", "Redis at BATON_REDIS_URL answers")
        finally:
            client.close()
        return
    status = EmbeddedServer(settings.data_dir).status()
    if not status["running"]:
        yield Finding(
            "warn",
            f"the embedded Valkey of {settings.data_dir} is not running: `baton serve` or "
            "`baton mcp` starts it",
        )
    elif status.get("condition", "ok") != "ok":
        yield Finding("FAIL", f"the embedded Valkey of {settings.data_dir}: {status['condition']}")
    else:
        yield Finding(
            "ok", f"embedded Valkey {status.get('valkey_version')} running in {settings.data_dir}"
        )


def _api(environ: Mapping[str, str]) -> Iterator[Finding]:
    url = base_url_of(environ)
    try:
        token = token_of(environ)
    except ValueError as error:
        yield Finding("FAIL", f"{error}: fix the path or set BATON_TOKEN")
        return
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(base_url=url, timeout=TIMEOUT, headers=headers) as client:
            if client.get("/healthz").status_code != 200:
                yield Finding("FAIL", f"{url} answers, but not as Baton: check BATON_URL")
                return
            whoami = client.get("/v1/whoami")
    except httpx.TransportError as error:
        if "BATON_URL" in environ:  # chosen, so it should answer: a fault, said plainly
            yield Finding("FAIL", f"BATON_URL {url}: {_why(error)}; check BATON_URL")
        else:
            yield Finding(
                "warn",
                f"no Baton API answers at {url} ({_why(error)}): hooks keep their events "
                "until it does; run `baton serve`, or set BATON_URL to where it runs",
            )
        return
    if whoami.status_code == 200:
        who = whoami.json()
        yield Finding(
            "ok",
            f"the API at {url} answers; requests act as {who['agent']} in {who['namespace']} "
            f"({who['credential']}{', admin' if who['admin'] else ''})",
        )
    elif whoami.status_code == 401 and token:
        yield Finding(
            "FAIL", f"{url} refuses BATON_TOKEN (unknown, revoked or expired): issue a new one"
        )
    elif whoami.status_code == 401:
        yield Finding("FAIL", f"{url} requires a token: set BATON_TOKEN (`baton token add`)")
    else:
        yield Finding("FAIL", f"{url} answered /v1/whoami with {whoami.status_code}")


def _spools(settings: Settings) -> Iterator[Finding]:
    """Hook events kept in the data dir's spools (``baton.agents.spool``): each waits for
    the Baton it was recorded for, and the command that delivers it now."""
    for spool in waiting(str(settings.data_dir)):
        where = f"in {spool.folder}"
        if spool.events and spool.url is None:
            yield Finding(
                "warn",
                f"{spool.events} hook events wait {where} for a Baton this spool does not "
                "name: `BATON_URL=<its URL> baton hook --flush` with the token they were "
                "recorded with delivers them",
            )
        elif spool.events:
            # the spool is found by its URL and token: flush with the same ones
            command = f"BATON_URL={spool.url} baton hook --flush"
            token = " with the BATON_TOKEN they were recorded with" if spool.token else ""
            command = command if spool.token else f"env -u BATON_TOKEN {command}"
            yield Finding(
                "warn",
                f"{spool.events} hook events wait {where} for {spool.url}: `{command}`{token} "
                "delivers them once it answers",
            )
        if spool.rejected:
            yield Finding(
                "warn",
                f"{spool.rejected} hook events Baton refused are kept in "
                f"{spool.folder}/rejected.jsonl (each with the reason): read, then delete it",
            )


def _why(error: httpx.TransportError) -> str:
    """What a failed connection means, in words."""
    text = str(error).lower()
    if isinstance(error, httpx.UnsupportedProtocol):
        return "it needs http:// or https:// in front"
    if isinstance(error, httpx.ConnectError) and (
        "name or service not known" in text
        or "nodename nor servname" in text
        or "temporary failure in name resolution" in text
    ):
        return "its host name is not known"
    if isinstance(error, httpx.ConnectError) and ("ssl" in text or "tls" in text):
        return "the TLS handshake failed (https:// to a plain http server?)"
    if isinstance(error, httpx.ConnectError):
        return "nothing listens there (connection refused)"
    if isinstance(error, httpx.TimeoutException):
        return "it did not answer in time"
    if isinstance(error, httpx.RemoteProtocolError):
        return "something answers there, but not as an HTTP server Baton would be"
    return type(error).__name__


def _host(host: Host, home: Path, project: Path) -> Iterator[Finding]:
    """Where ``host`` is set up and whether what it starts is there; nothing when it is
    set up nowhere."""
    seen: set[Path] = set()
    for scope, base in (("user", None), ("project", project)):
        if base is not None and MCP_FILES[host].project is None:
            continue  # the host has no project file
        path, keys = mcp_config(host, home, base)
        if path.resolve() in seen:
            continue  # run in the home folder: the project's file is the user's, said once
        seen.add(path.resolve())
        entry = _entry(path, keys)
        if entry is None:
            continue
        again = f"`baton setup {host}{' --project' if base else ''}`"
        launch = _launch(entry)
        if launch is None or not _runnable(launch.command):
            program = None if launch is None else launch.command
            yield Finding(
                "FAIL",
                f"{host} ({scope}, {path}) starts `{program}`, which is not there: run "
                f"{again} again",
            )
            continue
        tools, problem = _handshake(launch, project)
        if problem is not None:
            yield Finding(
                "FAIL",
                f"{host} ({scope}, {path}): its MCP server `{launch.command}` did not start: "
                f"{problem}; run {again} again",
            )
        else:
            yield Finding(
                "ok", f"{host} ({scope}) starts Baton's MCP server ({tools} tools): {path}"
            )
    if host in HOOK_FILES:
        yield from _hooks(host, home, project)


# Where a host with command hooks keeps them, from the home or the project folder.
HOOK_FILES: dict[Host, tuple[str, str]] = {
    "claude-code": ("Claude Code", ".claude/settings.json"),
    "gemini": ("Gemini CLI", ".gemini/settings.json"),
    "codex": ("Codex", ".codex/hooks.json"),
}


def _hooks(host: Host, home: Path, project: Path) -> Iterator[Finding]:
    name, file = HOOK_FILES[host]
    user = MCP_FILES[host].user(home).with_name("hooks.json") if host == "codex" else home / file
    places: dict[Path, Path] = {}  # the same file once, by the name setup gave it
    for place in (project / file, user):
        places.setdefault(place.resolve(), place)
    recording = []
    for path in places.values():
        data = _json(path)
        hooks = data.get("hooks") if isinstance(data, dict) else None
        commands = [
            hook.get("command", "")
            for groups in (hooks.values() if isinstance(hooks, dict) else [])
            for group in (groups if isinstance(groups, list) else [])
            for hook in (group.get("hooks", []) if isinstance(group, dict) else [])
            if isinstance(hook, dict) and " hook " in hook.get("command", "")
        ]
        missing = sorted({c for c in commands if not _runnable((command_words(c) or [c])[0])})
        if missing:
            yield Finding("FAIL", f"{name} hooks in {path} run a missing program: {missing[0]}")
        elif commands:
            recording.append(path)
            scope = "user" if path.resolve() == user.resolve() else "project"
            trust = (
                list(_codex_trust(path, hooks or {}, home, project, scope))
                if host == "codex"
                else []
            )
            if all(finding.level != "FAIL" for finding in trust):
                yield Finding("ok", f"{name} records its sessions: {len(commands)} hooks in {path}")
            yield from trust
    if host == "codex" and len(recording) == 2:  # (Claude Code runs the same command once)
        yield Finding(
            "warn",
            f"Codex runs Baton's hooks in both {recording[1]} and {recording[0]}: every event "
            'reaches Baton twice and the agent is told "where were we" twice; keep one',
        )


def _codex_trust(
    path: Path, hooks: dict[str, Any], home: Path, project: Path, scope: str
) -> Iterator[Finding]:
    """Codex runs a hook only while the user's config.toml trusts it as it is (and does not
    disable it), and reads a project's hooks only in a trusted project."""
    user_config = MCP_FILES["codex"].user(home)
    config = read_config(user_config)
    state = codex_trust.state(config)
    untrusted = disabled = 0
    for event, (told, _) in HOOKED["codex"].items():
        groups = hooks.get(event)
        for index, group in enumerate(groups if isinstance(groups, list) else []):
            if not baton_group(group, told):
                continue
            trust = state.get(codex_trust.key(path, event, index))
            trust = trust if isinstance(trust, dict) else {}
            untrusted += trust.get("trusted_hash") != codex_trust.digest(event, group)
            disabled += trust.get("enabled") is False
    if untrusted:
        yield Finding(
            "FAIL",
            f"Codex skips {untrusted} of Baton's hooks in {path}: not trusted as they are; "
            f"run `baton setup codex{' --project' if scope == 'project' else ''}` again, or "
            "trust them in Codex's /hooks",
        )
    if disabled:
        yield Finding(
            "warn",
            f"{disabled} of Baton's hooks in {path} are turned off (enabled = false in "
            f"{user_config})",
        )
    if scope == "project" and not codex_trust.project_trusted(config, project):
        yield Finding("warn", codex_trust.untrusted_project(project, user_config))


def _launch(entry: dict[str, Any]) -> StdioServerParameters | None:
    """How a host starts the server its entry names: ``command`` and ``args`` with ``env``
    (OpenCode: one ``command`` list, ``environment``); None for an entry without one."""
    command, args = entry.get("command"), entry.get("args", [])
    env = entry.get("env", entry.get("environment")) or {}
    if isinstance(command, list) and command:
        command, args = command[0], command[1:]
    if not (isinstance(command, str) and isinstance(args, list) and isinstance(env, dict)):
        return None
    return StdioServerParameters(
        command=command, args=[str(a) for a in args], env={k: str(v) for k, v in env.items()}
    )


def _handshake(launch: StdioServerParameters, project: Path) -> tuple[int, str | None]:
    """Start the server as an MCP host does (the SDK's stdio client, in the project), and
    list its tools: how many, or what went wrong (its last line on stderr, else the
    error). A server that starts the embedded store leaves it running, as for the host."""

    async def listed(errlog: TextIO) -> int:
        with anyio.fail_after(START_SECONDS):
            async with (
                stdio_client(launch.model_copy(update={"cwd": str(project)}), errlog) as streams,
                ClientSession(*streams) as session,
            ):
                await session.initialize()
                return len((await session.list_tools()).tools)

    with tempfile.TemporaryFile("w+") as errlog:
        try:
            return anyio.run(listed, errlog), None
        except Exception as error:  # whatever stopped it is the finding, said in words
            errlog.seek(0)
            said = [line.strip() for line in errlog.read().splitlines() if line.strip()]
            if isinstance(error, TimeoutError):
                return 0, f"no answer within {START_SECONDS:.0f}s" + (
                    f" ({said[-1]})" if said else ""
                )
            if said:
                return 0, said[-1]
            cause: BaseException = error
            while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
                cause = cause.exceptions[0]  # the task group's: what failed in it
            return 0, f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__


def _entry(path: Path, keys: list[str]) -> dict[str, Any] | None:
    node: Any = read_config(path)
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _runnable(program: str) -> bool:
    return (os.path.isfile(program) and os.access(program, os.X_OK)) or (
        os.sep not in program and shutil.which(program) is not None
    )
