"""`baton hook` with no server to take its events: nothing is lost, nothing is sent twice.

Real hook processes (the installed `baton` command, as Claude Code runs it) record a session
while nothing listens at BATON_URL; their events wait in the data dir's spool and reach a
real `baton serve` later, in order and once: through the next hook call, or as the server
starts in open mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from baton.agents.spool import Spool
from tests.conftest import REPO, free_port, run_baton, running_server
from tests.test_claude_code_hooks import baton_hook


def hook(event: str, payload: dict[str, Any], **env: str) -> subprocess.CompletedProcess[str]:
    """`baton hook EVENT` with ``env`` (BATON_URL among it)."""
    return baton_hook(event, payload, env.pop("BATON_URL"), **env)


def event(session: str, cwd: Path, **fields: Any) -> dict[str, Any]:
    return {"session_id": session, "cwd": str(cwd), "transcript_path": "", **fields}


def spool_of(data_dir: Path, url: str) -> Path:
    """The spool folder of ``url`` without a token in ``data_dir``."""
    return Path(Spool(str(data_dir), url).folder)


def record_offline(cwd: Path, data_dir: Path, url: str) -> list[str]:
    """A short session recorded for ``url`` while no server listens there; the tools it
    used, in order (the last one twice, alike: two events all the same)."""
    offline = {"BATON_DATA_DIR": str(data_dir), "BATON_URL": url}
    started = hook("SessionStart", event("s-offline", cwd, source="startup"), **offline)
    assert started.returncode == 0
    context = json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "cannot take hook events" in context and str(spool_of(data_dir, url)) in context
    assert len(started.stderr.splitlines()) == 1 and "kept in" in started.stderr
    tools = ["Read", "Edit", "Grep", "Grep"]
    for tool in tools:
        used = hook(
            "PostToolUse",
            event("s-offline", cwd, tool_name=tool, tool_input={"file_path": f"{tool}.py"}),
            **offline,
        )
        assert (used.returncode, used.stdout) == (0, "")
    stopped = hook("Stop", event("s-offline", cwd, last_assistant_message="Done?"), **offline)
    assert stopped.returncode == 0
    assert (spool_of(data_dir, url) / "events.jsonl").stat().st_size > 0
    return tools


def exported_session(redis_url: str, session: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "baton.server.cli", "export"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=REPO,
        env={**os.environ, "BATON_REDIS_URL": redis_url},
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    [found] = [line for line in lines if line["type"] == "session" and line["id"] == session]
    return found


def test_events_kept_without_a_server_reach_it_through_the_next_hook(
    redis_url: str, tmp_path: Path
) -> None:
    """A session recorded while no server listens is kept in the spool; the next hook call
    that reaches the server delivers it first, in order (its SessionStart says how much it
    delivered), two alike events as two, and nothing waits afterwards. The same calls sent
    again (a crash before their delivery was noted) are not stored twice."""
    data_dir, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    tools = record_offline(tmp_path, data_dir, url)
    kept_calls = (spool_of(data_dir, url) / "events.jsonl").read_text()

    with running_server(redis_url, tmp_path / "serve.log", port=port):
        online = {"BATON_DATA_DIR": str(data_dir), "BATON_URL": url}
        started = hook("SessionStart", event("s-next", tmp_path, source="startup"), **online)
        assert (started.returncode, started.stderr) == (0, "")
        context = json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
        assert "received 8 hook calls kept while it was unreachable" in context
        assert not (spool_of(data_dir, url) / "events.jsonl").exists()

        def session() -> dict[str, Any]:
            found = httpx.get(f"{url}/v1/sessions/s-offline", headers={"X-Baton-Agent": "x"})
            return dict(found.json())

        assert (session()["status"], session()["observation_count"]) == ("completed", 6)
        (spool_of(data_dir, url) / "events.jsonl").write_text(kept_calls)
        again = hook("PostToolUse", event("s-next", tmp_path, tool_name="Bash"), **online)
        assert (again.returncode, again.stderr) == (0, "")
        assert (session()["status"], session()["observation_count"]) == ("completed", 6)
    kept = exported_session(redis_url, "s-offline")
    titles = [observation["title"] for observation in kept["observations"]]
    assert [title for title in titles if title in tools] == tools


def test_events_kept_without_a_server_reach_it_as_it_starts(redis_url: str, tmp_path: Path) -> None:
    """In open mode `baton serve` delivers what its data dir's spool holds as it starts,
    without waiting for a hook call."""
    data_dir, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    record_offline(tmp_path, data_dir, url)
    elsewhere = f"http://127.0.0.1:{free_port()}"  # kept for another server: left alone
    hook(
        "PostToolUse",
        event("s-other", tmp_path, tool_name="Read"),
        BATON_URL=elsewhere,
        BATON_DATA_DIR=str(data_dir),
    )

    log = tmp_path / "serve.log"
    with running_server(redis_url, log, port=port, BATON_DATA_DIR=str(data_dir)):
        deadline = time.monotonic() + 30
        while (spool_of(data_dir, url) / "events.jsonl").exists():
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        session = httpx.get(f"{url}/v1/sessions/s-offline", headers={"X-Baton-Agent": "x"})
        assert session.json()["observation_count"] == 6
        other = httpx.get(f"{url}/v1/sessions/s-other", headers={"X-Baton-Agent": "x"})
        assert other.status_code == 404
    assert (spool_of(data_dir, elsewhere) / "events.jsonl").stat().st_size > 0


def test_an_event_baton_refuses_is_set_aside_and_the_rest_delivered(
    redis_url: str, tmp_path: Path
) -> None:
    """A kept call Baton refuses for itself (here: an agent name it never accepts) would be
    refused for ever, and a line that is not a call `baton hook` makes (another endpoint, a
    line cut short) must never be sent with the user's token: each is moved to
    rejected.jsonl, kept for a person to read, and what follows is delivered."""
    data_dir, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    spool = spool_of(data_dir, url)
    spool.mkdir(parents=True)
    bad = {"method": "POST", "path": "/v1/sessions/s-x/end", "body": {}, "agent": "not valid!"}
    foreign = {"method": "DELETE", "path": "/v1/tokens", "body": {}, "agent": None}
    lines = [json.dumps(bad), json.dumps(foreign), '{"cut": ']
    (spool / "events.jsonl").write_text("\n".join(lines) + "\n")
    with running_server(redis_url, tmp_path / "serve.log", port=port):
        online = {"BATON_DATA_DIR": str(data_dir), "BATON_URL": url}
        used = hook("PostToolUse", event("s-after", tmp_path, tool_name="Read"), **online)
        assert (used.returncode, used.stderr) == (0, "")
        session = httpx.get(f"{url}/v1/sessions/s-after", headers={"X-Baton-Agent": "x"})
        assert session.json()["observation_count"] == 1
    rejected = [json.loads(line) for line in (spool / "rejected.jsonl").read_text().splitlines()]
    assert [entry["call"] for entry in rejected[:2]] == [bad, json.dumps(foreign) + "\n"]
    assert [entry["reason"] for entry in rejected[1:]] == ["not a hook call", "not a hook call"]
    assert not (spool / "events.jsonl").exists()


def test_a_spool_that_cannot_be_written_costs_one_line_not_the_agent(tmp_path: Path) -> None:
    """With no server and a data dir that cannot hold the spool (here a file stands where
    the folder would be), the hook still exits 0 at once, saying in one line that the event
    is lost and why."""
    blocked = tmp_path / "data"
    blocked.write_text("not a folder")
    offline = {"BATON_DATA_DIR": str(blocked), "BATON_URL": f"http://127.0.0.1:{free_port()}"}
    used = hook("PostToolUse", event("s-lost", tmp_path, tool_name="Read"), **offline)
    assert (used.returncode, used.stdout) == (0, "")
    [line] = used.stderr.splitlines()
    assert "event lost" in line and str(blocked) in line


def test_doctor_names_events_waiting_and_the_command_that_delivers_them(
    redis_url: str, tmp_path: Path
) -> None:
    """Events kept for a Baton that is not running are named by `baton doctor` (how many,
    the folder, the URL) with the command that delivers them; that command, once a server
    answers there, delivers every one, and doctor then has nothing to say about spools."""
    data_dir, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    record_offline(tmp_path, data_dir, url)
    env = {"BATON_DATA_DIR": str(data_dir), "HOME": str(tmp_path), "BATON_URL": url}

    def spool_lines() -> list[str]:
        checked = run_baton("doctor", env=env, without=("BATON_TOKEN",), cwd=tmp_path)
        return [line for line in checked.stdout.splitlines() if "hook events" in line]

    [line] = spool_lines()
    command = f"env -u BATON_TOKEN BATON_URL={url} baton hook --flush"  # kept without a token
    assert line.startswith(f"warn 8 hook events wait in {spool_of(data_dir, url)} for {url}")
    assert f"`{command}`" in line
    with running_server(redis_url, tmp_path / "serve.log", port=port):
        name, value = command.split(" ")[3].split("=")
        flushed = subprocess.run(  # the installed command, as the user types it
            [str(Path(sys.executable).with_name("baton")), "hook", "--flush"],
            env={**{k: v for k, v in os.environ.items() if k != "BATON_TOKEN"}, **env, name: value},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert flushed.returncode == 0, flushed.stderr
        session = httpx.get(f"{url}/v1/sessions/s-offline", headers={"X-Baton-Agent": "x"})
        assert session.json()["observation_count"] == 6
    assert spool_lines() == []
