"""Codex's hooks as ``baton setup codex`` writes them: Codex itself (0.171.0, its
app-server's ``hooks/list``, no login) lists each as trusted, and fired with the payloads
Codex sends (the input schemas embedded in that binary: Claude Code's fields plus
``turn_id``, ``model``, ``permission_mode``; ``apply_patch`` edits as patch text) they
record a session and give the next one "where were we"."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from baton.agents import codex_trust
from baton.server.model.patches import patched_files
from tests.conftest import (
    REPO,
    additional_context,
    assert_resumed,
    fire_hook,
    run_baton,
    shop_with_hooks,
)

CODEX = REPO / "tests" / "hosts" / "node_modules" / ".bin" / "codex"


def listed_hooks(home: Path, cwd: Path, **env: str) -> dict[str, Any]:
    """What ``codex app-server`` answers ``hooks/list`` for ``cwd``, for a user whose home
    is ``home`` (and ``env``): ``{hooks, warnings, errors}``."""
    assert CODEX.exists(), "run make npm-clients"
    server = subprocess.Popen(
        [str(CODEX), "app-server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=cwd,
        env={**os.environ, "HOME": str(home), **env},
    )
    timer = threading.Timer(60, server.kill)  # a Codex that never answers fails the test
    timer.start()
    try:
        assert server.stdin is not None and server.stdout is not None
        for message in (
            {
                "id": 0,
                "method": "initialize",
                "params": {"clientInfo": {"name": "t", "version": "0"}},
            },
            {"method": "initialized"},
            {"id": 1, "method": "hooks/list", "params": {"cwds": [str(cwd)]}},
        ):
            server.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        server.stdin.flush()  # kept open: the app-server stops at the end of its input
        for line in server.stdout:
            answer = json.loads(line)
            if answer.get("id") == 1:
                [listing] = answer["result"]["data"]
                return dict(listing)
        raise AssertionError("codex app-server ended without answering hooks/list")
    finally:
        timer.cancel()
        server.kill()
        server.wait()


def baton_hooks(listing: dict[str, Any], source: Path) -> dict[str, str]:
    """Each of Baton's hooks Codex listed from the file ``source``: event -> trust status."""
    return {
        hook["eventName"]: hook["trustStatus"]
        for hook in listing["hooks"]
        if hook["sourcePath"] == str(source) and " hook " in hook["command"]
    }


EVENTS = {"sessionStart", "userPromptSubmit", "postToolUse", "stop", "sessionEnd"}


@pytest.mark.slow
def test_codex_lists_each_hook_setup_wrote_as_trusted(tmp_path: Path) -> None:
    """After `baton setup codex`, Codex lists Baton's five hooks from ~/.codex/hooks.json
    as trusted (it runs no other), beside a hook of the user's own that stays untrusted, with
    no warning."""
    hooks_file = tmp_path / ".codex" / "hooks.json"
    hooks_file.parent.mkdir()
    theirs = {"type": "command", "command": "echo mine", "timeout": 5}
    hooks_file.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [theirs]}]}}))
    assert run_baton("setup", "codex", env={"HOME": str(tmp_path)}).returncode == 0
    listing = listed_hooks(tmp_path, tmp_path)
    assert (listing["warnings"], listing["errors"]) == ([], [])
    assert baton_hooks(listing, hooks_file) == dict.fromkeys(EVENTS, "trusted")
    [mine] = [hook for hook in listing["hooks"] if hook["command"] == "echo mine"]
    assert mine["trustStatus"] == "untrusted"


@pytest.mark.slow
def test_codex_trusts_a_project_s_hooks_once_the_user_trusts_the_project(
    tmp_path: Path,
) -> None:
    """`baton setup codex --project` trusts the hooks it writes into the project, not the
    project itself: setup and `baton doctor` say how to trust it, and once the user has,
    Codex lists them as trusted. A hook changed afterwards is `modified` for Codex and a
    FAIL for the doctor, until setup runs again."""
    home, project = tmp_path / "home", tmp_path / "shop"
    project.mkdir(parents=True)
    home.mkdir()
    env = {"HOME": str(home), "BATON_REDIS_URL": "redis://127.0.0.1:9"}
    done = run_baton("setup", "codex", "--project", str(project), env=env)
    assert done.returncode == 0, done.stderr
    assert f'[projects."{project}"]' in done.stdout
    hooks_file = project / ".codex" / "hooks.json"
    assert baton_hooks(listed_hooks(home, project), hooks_file) == {}  # not read yet
    with open(home / ".codex" / "config.toml", "a") as config:
        config.write(f'\n[projects."{project}"]\ntrust_level = "trusted"\n')
    assert baton_hooks(listed_hooks(home, project), hooks_file) == dict.fromkeys(EVENTS, "trusted")

    hooks = json.loads(hooks_file.read_text())
    hooks["hooks"]["Stop"][0]["hooks"][0]["timeout"] = 45
    hooks_file.write_text(json.dumps(hooks))
    assert baton_hooks(listed_hooks(home, project), hooks_file)["stop"] == "modified"
    doctor = run_baton("doctor", env=env, cwd=project)
    assert f"FAIL Codex skips 1 of Baton's hooks in {hooks_file}" in doctor.stdout
    assert run_baton("setup", "codex", "--project", str(project), env=env).returncode == 0
    assert baton_hooks(listed_hooks(home, project), hooks_file)["stop"] == "trusted"


def test_a_codex_session_is_recorded_and_the_next_starts_where_it_left_off(
    api_url: str, tmp_path: Path
) -> None:
    """Start, prompt, an `apply_patch` edit, the agent's answer and the end of session
    c-1 land in Baton as agent codex, the patched files by their path; session c-2's
    SessionStart answers c-1 and its file as additionalContext, and after c-2 is compacted
    (SessionStart, source "compact") c-2's own state comes first."""
    project, hooks = shop_with_hooks("codex", tmp_path, api_url, ".codex/hooks.json")

    def fire(event: str, session: str, **fields: Any) -> subprocess.CompletedProcess[str]:
        [group] = hooks[event]
        common = {"transcript_path": None, "cwd": str(project), "hook_event_name": event}
        if event != "SessionEnd":
            common |= {"model": "gpt-5.5-codex", "permission_mode": "default"}
        [hook] = group["hooks"]
        command = ["/bin/sh", "-lc", hook["command"]]  # as Codex runs a command hook
        payload = {"session_id": session, **common, **fields}
        return fire_hook(command, payload, project, tmp_path, timeout=hook["timeout"])

    fire("SessionStart", "c-1", source="startup")
    fire("UserPromptSubmit", "c-1", turn_id="t1", prompt="let the checkout page take coupons")
    patch = (
        "*** Begin Patch\n*** Update File: src/checkout.ts\n@@\n-a\n+b\n"
        "*** Add File: src/coupon.ts\n+export {}\n*** End Patch\n"
    )
    fire(
        "PostToolUse",
        "c-1",
        turn_id="t1",
        tool_name="apply_patch",
        tool_use_id="call_1",
        tool_input={"command": patch},
        tool_response="Success. Updated the following files:\nM src/checkout.ts\nA src/coupon.ts",
    )
    fire(
        "Stop",
        "c-1",
        turn_id="t1",
        last_assistant_message="Coupons work; the open question is stacking them.",
        stop_hook_active=False,
    )
    fire("SessionEnd", "c-1", reason="other")

    started = fire("SessionStart", "c-2", source="startup")
    src = project / "src"
    assert_resumed(started, api_url, "c-1", "codex", [src / "checkout.ts", src / "coupon.ts"])

    fire("UserPromptSubmit", "c-2", turn_id="t2", prompt="now make coupons stack")
    compacted = fire("SessionStart", "c-2", source="compact")
    assert "## This session: now make coupons stack" in additional_context(compacted)


def trust_as_codex_would(home: Path, hook: dict[str, Any]) -> None:
    """What trusting ``hook`` (as hooks/list answered it) in Codex's /hooks writes."""
    with open(home / ".codex" / "config.toml", "a") as config:
        config.write(f'\n[hooks.state."{hook["key"]}"]\ntrusted_hash = "{hook["currentHash"]}"\n')


@pytest.mark.slow
def test_setup_again_keeps_the_user_s_own_hooks_trusted_and_their_switches(
    tmp_path: Path,
) -> None:
    """Setup run again keeps Baton's hooks where they are, so a hook the user added after
    them and trusted stays trusted, and a Baton hook the user turned off (enabled = false)
    stays off; `baton doctor` says it is off."""
    env = {"HOME": str(tmp_path), "BATON_REDIS_URL": "redis://127.0.0.1:9"}
    assert run_baton("setup", "codex", env=env).returncode == 0
    hooks_file = tmp_path / ".codex" / "hooks.json"
    hooks = json.loads(hooks_file.read_text())
    hooks["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "echo mine"}]})
    hooks_file.write_text(json.dumps(hooks))
    listing = listed_hooks(tmp_path, tmp_path)
    [mine] = [hook for hook in listing["hooks"] if hook["command"] == "echo mine"]
    trust_as_codex_would(tmp_path, mine)
    config = tmp_path / ".codex" / "config.toml"
    table = f'[hooks.state."{hooks_file}:session_end:0:0"]\n'
    config.write_text(config.read_text().replace(table, table + "enabled = false\n"))

    again = run_baton("setup", "codex", env=env)
    assert again.returncode == 0, again.stderr
    listing = listed_hooks(tmp_path, tmp_path)
    statuses = {hook["command"]: hook["trustStatus"] for hook in listing["hooks"]}
    assert statuses["echo mine"] == "trusted"
    assert baton_hooks(listing, hooks_file) == dict.fromkeys(EVENTS, "trusted")
    [end] = [hook for hook in listing["hooks"] if hook["eventName"] == "sessionEnd"]
    assert end["enabled"] is False
    doctor = run_baton("doctor", env=env, cwd=tmp_path)
    assert f"warn 1 of Baton's hooks in {hooks_file} are turned off" in doctor.stdout
    assert "trusted project" not in doctor.stdout  # run in the home folder: the user's hooks


@pytest.mark.slow
def test_doctor_warns_when_codex_runs_baton_s_hooks_from_both_layers(tmp_path: Path) -> None:
    """Set up for the user and for a trusted project, Codex runs both files' hooks: every
    event would reach Baton twice and the agent be told "where were we" twice, so `baton
    doctor` says to keep one; a user's own command that mentions "hook" is not Baton's."""
    home, project = tmp_path / "home", tmp_path / "shop"
    project.mkdir()
    env = {"HOME": str(home), "BATON_REDIS_URL": "redis://127.0.0.1:9"}
    assert run_baton("setup", "codex", env=env).returncode == 0
    hooks_file = project / ".codex" / "hooks.json"
    hooks_file.parent.mkdir()
    theirs = {"hooks": [{"type": "command", "command": "git hook run post-stop"}]}
    hooks_file.write_text(json.dumps({"hooks": {"Stop": [theirs]}}))
    assert run_baton("setup", "codex", "--project", str(project), env=env).returncode == 0
    with open(home / ".codex" / "config.toml", "a") as config:
        config.write(f'\n[projects."{project}"]\ntrust_level = "trusted"\n')
    doctor = run_baton("doctor", env=env, cwd=project)
    assert "Codex runs Baton's hooks in both" in doctor.stdout
    assert "FAIL Codex skips" not in doctor.stdout
    assert "trusted project" not in doctor.stdout


def test_a_patch_names_each_file_once_by_its_normalised_path() -> None:
    """`./a` and `a` in one patch are one file; a move names its target; text that is not a
    patch names none."""
    patch = (
        "*** Begin Patch\r\n*** Update File: ./src/a.py\r\n@@\r\n-x\r\n+y\r\n"
        "*** Update File: src/a.py\r\n*** Move to: src/b.py\r\n*** Delete File: /etc/c\r\n"
        "*** End Patch\r\n"
    )
    assert patched_files(patch, "/w") == ["/w/src/a.py", "/w/src/b.py", "/etc/c"]
    assert patched_files("echo '*** Update File: x'", "/w") == []


@pytest.mark.slow
def test_setup_writes_where_codex_home_points(tmp_path: Path) -> None:
    """With CODEX_HOME set (Codex then reads nothing from ~/.codex), setup writes the server,
    the hooks and their trust there, and Codex lists them trusted."""
    codex_home = tmp_path / "elsewhere"
    env = {"HOME": str(tmp_path), "CODEX_HOME": str(codex_home)}
    assert run_baton("setup", "codex", env=env).returncode == 0
    assert not (tmp_path / ".codex").exists()
    listing = listed_hooks(tmp_path, tmp_path, CODEX_HOME=str(codex_home))
    assert baton_hooks(listing, codex_home / "hooks.json") == dict.fromkeys(EVENTS, "trusted")


def test_a_project_is_trusted_by_itself_or_by_its_git_repository(tmp_path: Path) -> None:
    """Codex reads a project's .codex folder when the user trusted that folder or the git
    repository holding it, not any folder above it."""
    code, project = tmp_path / "code", tmp_path / "code" / "shop"
    project.mkdir(parents=True)
    trusting = {"projects": {str(code): {"trust_level": "trusted"}}}
    assert not codex_trust.project_trusted(trusting, project)
    (code / ".git").mkdir()
    assert codex_trust.project_trusted(trusting, project)
    assert codex_trust.project_trusted(
        {"projects": {str(project): {"trust_level": "trusted"}}}, project
    )
