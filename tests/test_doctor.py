"""``baton doctor`` names what works and, on a broken setup, each fault and its fix, one
line each, exiting 1 when anything must be fixed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import redis

from baton.server.mcp.mcp_server import tool_list
from tests.conftest import free_port, issue, run_baton, running_server

BATON = str(Path(sys.executable).with_name("baton"))


def baton(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``baton ARGS`` for a user whose home is ``home`` (and no BATON_TOKEN unless given)."""
    return run_baton(*args, env={"HOME": str(home), **env}, without=("BATON_TOKEN",), cwd=home)


def test_a_working_setup_is_all_ok(redis_url: str, api_url: str, tmp_path: Path) -> None:
    """Store reachable, API answering, Claude Code set up: every line ok, exit 0; the MCP
    server Claude Code would start was started the same way and listed every tool."""
    assert baton("setup", "claude-code", home=tmp_path, BATON_REDIS_URL=redis_url).returncode == 0
    done = baton("doctor", home=tmp_path, BATON_REDIS_URL=redis_url, BATON_URL=api_url)
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert "ok   Redis at BATON_REDIS_URL answers" in lines
    assert any(line.startswith(f"ok   the API at {api_url} answers") for line in lines)
    started = f"ok   claude-code (user) starts Baton's MCP server ({len(tool_list())} tools)"
    assert any(line.startswith(started) for line in lines), lines
    # the working directory is the home here: its settings.json is one file, said once
    assert sum(line.startswith("ok   Claude Code records its sessions") for line in lines) == 1
    assert any(
        line.startswith("ok   not set up here (") and "opencode, gemini" in line for line in lines
    )
    assert not any(line.startswith("FAIL") for line in lines)


def test_a_broken_setup_names_each_fault(redis_url: str, tmp_path: Path) -> None:
    """An unreachable Redis, a token the server does not know, and host files naming a
    baton that is not there: each is a FAIL line saying what to do, and the exit is 1."""
    store = f"{redis_url}?db=5"
    redis.Redis.from_url(store).flushdb()
    issue(store, "someone")  # tokens exist: the server requires one
    gone = "/nowhere/bin/baton"
    for host in ("claude-code", "opencode"):
        assert baton("setup", host, "--command", gone, home=tmp_path).returncode == 0
    with running_server(store, tmp_path / "serve.log") as url:
        done = baton(
            "doctor",
            home=tmp_path,
            BATON_REDIS_URL="redis://127.0.0.1:1",
            BATON_URL=url,
            BATON_TOKEN="bt_not_a_token",
        )
    fails = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert done.returncode == 1
    assert fails[0].startswith("FAIL cannot reach Redis at BATON_REDIS_URL")
    assert fails[1] == f"FAIL {url} refuses BATON_TOKEN (unknown, revoked or expired): " + (
        "issue a new one"
    )
    assert any("claude-code (user" in line and f"`{gone}`" in line for line in fails)
    assert any("opencode (user" in line and f"`{gone}`" in line for line in fails)
    assert any("Claude Code hooks" in line and gone in line for line in fails)
    redis.Redis.from_url(store).flushdb()


def test_a_baton_url_that_does_not_answer_is_a_fault_said_in_words(
    redis_url: str, tmp_path: Path
) -> None:
    """A BATON_URL that was set and does not answer is a FAIL (exit 1) that says why: no
    scheme, an unknown host, nothing listening; left unset, no server is only a warning."""
    closed = free_port()
    for url, why in (
        (f"127.0.0.1:{closed}", "it needs http:// or https:// in front"),
        ("http://no-such-host.invalid:8765", "its host name is not known"),
        (f"http://127.0.0.1:{closed}", "nothing listens there (connection refused)"),
    ):
        done = baton("doctor", home=tmp_path, BATON_REDIS_URL=redis_url, BATON_URL=url)
        assert done.returncode == 1, url
        assert f"FAIL BATON_URL {url}: {why}; check BATON_URL" in done.stdout.splitlines()
    unset = baton("doctor", home=tmp_path, BATON_REDIS_URL=redis_url, BATON_PORT=str(closed))
    assert any(line.startswith("warn no Baton API answers") for line in unset.stdout.splitlines())


def test_bare_baton_shows_the_overview(tmp_path: Path) -> None:
    """`baton` alone prints the commands with what each does (doctor among them), exit 0."""
    done = baton(home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "doctor" in done.stdout and "check the setup end to end" in done.stdout


def test_a_host_whose_mcp_server_does_not_start_is_a_fault_with_its_words(
    tmp_path: Path,
) -> None:
    """A host file naming a program that is there but does not start an MCP server (here
    one that fails as a broken install does, a line on stderr): the doctor starts it as
    the host would and says that line, exit 1."""
    broken = tmp_path / "bin" / "baton"
    broken.parent.mkdir()
    broken.write_text(
        "#!/bin/sh\necho 'baton: cannot import baton.server (broken venv)' >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    assert baton("setup", "gemini", "--command", str(broken), home=tmp_path).returncode == 0
    done = baton("doctor", home=tmp_path, BATON_REDIS_URL="redis://127.0.0.1:1")
    assert done.returncode == 1
    [line] = [line for line in done.stdout.splitlines() if line.startswith("FAIL gemini")]
    assert line.endswith(
        f"its MCP server `{broken}` did not start: baton: cannot import baton.server "
        "(broken venv); run `baton setup gemini` again"
    )
