"""``baton setup claude-code|opencode``: the files it writes are the ones the hosts read, it
keeps what was there, it changes nothing the second time, and what the files name runs:
the MCP server they start answers with Baton's tools, and the hook commands record a
session and give "where were we" back."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters

from baton.agents.host_setup import COMMANDS, HOSTS, SKILLS
from baton.server.operations import OPERATIONS
from tests.conftest import REPO, run_baton

pytestmark = pytest.mark.anyio
BATON = str(Path(sys.executable).with_name("baton"))
TOOLS = {operation.name for operation in OPERATIONS if operation.tool}


def setup(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return run_baton("setup", *args, env={"HOME": str(home)})


def frontmatter(path: Path) -> dict[str, str]:
    head = path.read_text().split("---\n")[1]
    return dict(line.split(": ", 1) for line in head.splitlines() if ": " in line)


async def tools_of(command: str, args: list[str], env: dict[str, str], redis_url: str) -> set[str]:
    """The tools the MCP server a host would start lists."""
    server = StdioServerParameters(
        command=command, args=args, env={**os.environ, **env, "BATON_REDIS_URL": redis_url}
    )
    async with Client(server) as client:
        return {tool.name for tool in (await client.list_tools()).tools}


def test_claude_code_project_setup_is_idempotent_and_keeps_what_was_there(tmp_path: Path) -> None:
    """Into a project: .mcp.json, .claude/settings.json (the user's own hook and settings
    kept), the four skills and /remember; a dry run before writes nothing and shows the
    diff; a second run says every file is unchanged."""
    project, home = tmp_path / "app", tmp_path / "home"
    (project / ".claude").mkdir(parents=True)
    mine = {"type": "command", "command": "echo mine"}
    settings = project / ".claude" / "settings.json"
    settings.write_text(json.dumps({"model": "x", "hooks": {"Stop": [{"hooks": [mine]}]}}))
    dry = setup("claude-code", "--project", str(project), "--dry-run", home=home)
    assert dry.returncode == 0 and "+++ " + str(project / ".mcp.json") in dry.stdout
    assert not (project / ".mcp.json").exists()
    first = setup("claude-code", "--project", str(project), home=home)
    assert first.returncode == 0, first.stderr
    written = {line.split(" ", 1)[1] for line in first.stdout.splitlines()}
    assert str(project / ".mcp.json") in written and not (home / ".claude.json").exists()
    again = setup("claude-code", "--project", str(project), home=home)
    assert again.stdout.splitlines() == [
        line.replace("wrote", "unchanged") for line in first.stdout.splitlines()
    ]
    config = json.loads(settings.read_text())
    assert config["model"] == "x"
    assert config["hooks"]["Stop"][0] == {"hooks": [mine]}
    assert len(config["hooks"]["Stop"]) == 2  # the user's, then Baton's (once)
    for name in SKILLS:
        skill = frontmatter(project / ".claude" / "skills" / name / "SKILL.md")
        assert skill["name"] == name and skill["user-invocable"] == "true"
    assert "handoff" in frontmatter(project / ".claude/skills/handoff/SKILL.md")["description"]
    for name in COMMANDS["claude-code"]:
        assert "memory_save" in (project / ".claude" / "commands" / f"{name}.md").read_text()


def test_a_config_that_is_not_json_is_refused_and_left_alone(tmp_path: Path) -> None:
    """A broken settings file is one line of error (exit 2), and stays as it was."""
    project = tmp_path / "app"
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "settings.json").write_text("{not json")
    refused = setup("claude-code", "--project", str(project), home=tmp_path / "home")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert "settings.json is not valid JSON" in refused.stderr
    assert (project / ".claude" / "settings.json").read_text() == "{not json"


@pytest.mark.slow
async def test_what_claude_codes_files_name_runs(
    tmp_path: Path, redis_url: str, api_url: str
) -> None:
    """User scope: the MCP server ~/.claude.json names starts and lists Baton's tools; the
    hooks ~/.claude/settings.json names record a session and, in the next session,
    SessionStart gives its open question back."""
    home = tmp_path / "home"
    assert setup("claude-code", home=home).returncode == 0
    server = json.loads((home / ".claude.json").read_text())["mcpServers"]["baton"]
    assert await tools_of(server["command"], server["args"], server["env"], redis_url) == TOOLS
    hooks = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]
    cwd = tmp_path / f"repo-{secrets.token_hex(3)}"
    cwd.mkdir()
    question = "Should refunds above 500 need a second approval?"

    def run(event: str, session: str, **payload: Any) -> subprocess.CompletedProcess[str]:
        [command] = [h["command"] for group in hooks[event] for h in group["hooks"]]
        body = {"session_id": session, "cwd": str(cwd), "hook_event_name": event, **payload}
        return subprocess.run(
            shlex.split(command),
            input=json.dumps(body),
            env={**os.environ, "BATON_URL": api_url, "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    one, two = f"cc-{secrets.token_hex(4)}", f"cc-{secrets.token_hex(4)}"
    assert run("SessionStart", one, source="startup").returncode == 0
    assert run("UserPromptSubmit", one, prompt="rework refunds").returncode == 0
    stopped = run("Stop", one, last_assistant_message=f"Refunds reworked. {question}")
    assert stopped.returncode == 0, stopped.stderr
    assert run("SessionEnd", one, reason="exit").returncode == 0
    started = run("SessionStart", two, source="startup")
    context = json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    assert question in context
    assert httpx.get(f"{api_url}/v1/sessions/{one}").json()["status"] == "completed"


@pytest.mark.slow
def test_hooks_reach_the_server_setup_was_told_of_from_any_shell(
    tmp_path: Path, api_url: str, redis_url: str
) -> None:
    """`BATON_URL=… baton setup claude-code` (a server off the default port) writes the URL
    into every hook command: Claude Code started from a shell without BATON_URL records
    its session on that server (before, the hooks sent to 8765 and the events were kept
    where nothing delivered them). Setting up again, with another URL, replaces Baton's
    hooks rather than adding a second set; `baton doctor` still finds them runnable."""
    home, cwd = tmp_path / "home", tmp_path / "repo"
    cwd.mkdir()
    elsewhere = "http://127.0.0.1:9"
    assert run_baton("setup", "claude-code", env={"HOME": str(home), "BATON_URL": elsewhere})
    told = {"HOME": str(home), "BATON_URL": api_url, "BATON_REDIS_URL": redis_url}
    done = run_baton("setup", "claude-code", env=told)  # (the doctor below starts its MCP server)
    assert done.returncode == 0, done.stderr
    hooks = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]
    assert all(len(groups) == 1 for groups in hooks.values())
    [command] = [h["command"] for group in hooks["UserPromptSubmit"] for h in group["hooks"]]
    session = f"cc-{secrets.token_hex(4)}"
    body = {"session_id": session, "cwd": str(cwd), "hook_event_name": "UserPromptSubmit"}
    environment = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
    ran = subprocess.run(
        ["bash", "-c", command],  # as Claude Code runs a hook command
        input=json.dumps({**body, "prompt": "rework refunds"}),
        env={**environment, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert httpx.get(f"{api_url}/v1/sessions/{session}").json()["observation_count"] == 1
    doctor = run_baton("doctor", env={"HOME": str(home), "BATON_URL": api_url}, cwd=cwd)
    assert "run a missing program" not in doctor.stdout, doctor.stdout


@pytest.mark.slow
async def test_what_opencodes_files_name_runs(tmp_path: Path, redis_url: str) -> None:
    """Into a project: opencode.json's MCP server starts and lists Baton's tools; the skills
    are in .opencode/skills with their names; /remember and /recall are commands."""
    project = tmp_path / "app"
    project.mkdir()
    done = setup("opencode", "--project", str(project), home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    server = json.loads((project / "opencode.json").read_text())["mcp"]["baton"]
    assert server["type"] == "local" and server["enabled"] is True
    command, *args = server["command"]
    assert await tools_of(command, args, server["environment"], redis_url) == TOOLS
    for name in SKILLS:
        assert frontmatter(project / ".opencode" / "skills" / name / "SKILL.md")["name"] == name
    for name in COMMANDS["opencode"]:
        assert (project / ".opencode" / "commands" / f"{name}.md").exists()


def test_a_symlink_out_of_the_project_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """A project whose .claude/skills/handoff points out of it (at a folder holding the
    user's .bashrc) is refused with one line naming the link, and no file anywhere
    changes, inside the project or out of it."""
    project, home, outside = tmp_path / "app", tmp_path / "home", tmp_path / "home-dotfiles"
    (project / ".claude" / "skills").mkdir(parents=True)
    outside.mkdir()
    (outside / "SKILL.md").write_text("export PATH=/usr/bin\n")
    (project / ".claude" / "skills" / "handoff").symlink_to(outside)
    refused = setup("claude-code", "--project", str(project), home=home)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "outside" in refused.stderr and "symlink" in refused.stderr
    assert (outside / "SKILL.md").read_text() == "export PATH=/usr/bin\n"
    assert not (project / ".mcp.json").exists() and not (project / ".claude/settings.json").exists()


def test_a_dotfile_link_inside_home_is_followed_and_kept(tmp_path: Path) -> None:
    """~/.claude.json linked into ~/dotfiles (as dotfile managers do) is updated where it
    lives, the link kept, the user's other settings and the file's permissions kept."""
    home = tmp_path / "home"
    (home / "dotfiles").mkdir(parents=True)
    real = home / "dotfiles" / "claude.json"
    real.write_text(json.dumps({"theme": "dark"}))
    real.chmod(0o600)
    (home / ".claude.json").symlink_to(real)
    done = setup("claude-code", home=home)
    assert done.returncode == 0, done.stderr
    assert (home / ".claude.json").is_symlink()
    config = json.loads(real.read_text())
    assert config["theme"] == "dark" and config["mcpServers"]["baton"]["args"] == ["mcp"]
    assert real.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b'{"hooks": {"Stop": "echo mine"}}', "hooks.Stop is not a list"),
        (b'{"model": "caf\xe9"}', "is not UTF-8 text"),
        (b"[1, 2]", "holds no JSON object"),
    ],
)
def test_a_settings_file_of_another_shape_is_left_exactly_as_it_was(
    tmp_path: Path, content: bytes, said: str
) -> None:
    """Hooks of a shape Claude Code does not read (a string where a list belongs), a file
    that is not UTF-8, or JSON that is not an object: one line saying which, exit 2, and
    the file byte for byte as it was (a string of hooks is never cut into characters)."""
    project = tmp_path / "app"
    (project / ".claude").mkdir(parents=True)
    settings = project / ".claude" / "settings.json"
    settings.write_bytes(content)
    refused = setup("claude-code", "--project", str(project), home=tmp_path / "home")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert said in refused.stderr and "Traceback" not in refused.stderr
    assert settings.read_bytes() == content
    assert not (project / ".mcp.json").exists()


def test_a_full_disk_leaves_every_file_as_it_was(small_disk: Path) -> None:
    """On a disk too full to take the new files, setup says so in one line and changes
    nothing: ~/.claude.json keeps its content, and no temporary file or new folder is left
    behind."""
    home = small_disk / "home"
    home.mkdir()
    original = json.dumps({"projects": {"/a": {"history": ["x" * 200_000]}}})
    (home / ".claude.json").write_text(original)
    (home / ".claude" / "skills").mkdir(parents=True)  # the skills' folders are made anew
    with open(small_disk / "filler", "wb") as out, contextlib.suppress(OSError):
        out.write(b"\0" * 8 * 2**20)
    refused = setup("claude-code", home=home)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "nothing was changed" in refused.stderr and "No space left" in refused.stderr
    assert (home / ".claude.json").read_text() == original
    assert sorted(path.name for path in home.iterdir()) == [".claude", ".claude.json"]
    assert [path.name for path in (home / ".claude").rglob("*")] == ["skills"]


def test_the_skills_point_at_skills_setup_installs(tmp_path: Path) -> None:
    """Every skill a written skill's "See also" names is one `baton setup claude-code`
    installs beside it (the handoff skill names recap, session-history and recall), and
    /remember asks for agentmemory's steps: 2-5 lower-case concepts, the user's own words,
    `files: []` when none, the concepts echoed back."""
    assert setup("claude-code", home=tmp_path).returncode == 0
    skills = tmp_path / ".claude" / "skills"
    installed = {path.name for path in skills.iterdir()}
    named: dict[str, set[str]] = {}
    for name in installed:
        text = (skills / name / "SKILL.md").read_text()
        if "## See also" in text:
            see_also = text.split("## See also", 1)[1]
            named[name] = set(re.findall(r"`([a-z-]+)`", see_also))
    assert named["handoff"] >= {"recap", "session-history", "recall"}
    assert all(names <= installed for names in named.values()), named
    remember = (tmp_path / ".claude" / "commands" / "remember.md").read_text()
    for step in ("2-5 lower-case `concepts`", "user's own words", "`files: []`", "echo the"):
        assert step in remember


# Each host's entry as the host's own code or documentation reads it (what setup must write):
# Gemini CLI 0.61.0 (docs/tools/mcp-server.md), Codex 0.171.0 (`codex mcp add` writes the
# same), Cursor (@cursor/sdk 1.0.32's zod schema), Claude Desktop (modelcontextprotocol's
# connect-local-servers), VS Code 1.102+ (mcp-configuration.md: "servers", type required),
# Cline 4.1 (apps/vscode/src/services/mcp/schemas.ts).
SHAPES: dict[str, tuple[str, str | None, list[str], set[str]]] = {
    # host: (user file under HOME, project file, keys to the entry, the entry's fields)
    "gemini": (".gemini/settings.json", ".gemini/settings.json", ["mcpServers"], set()),
    "codex": (".codex/config.toml", ".codex/config.toml", ["mcp_servers"], set()),
    "cursor": (".cursor/mcp.json", ".cursor/mcp.json", ["mcpServers"], {"type"}),
    "claude-desktop": (".config/Claude/claude_desktop_config.json", None, ["mcpServers"], set()),
    "vscode": (".config/Code/User/mcp.json", ".vscode/mcp.json", ["servers"], {"type"}),
    "cline": (
        ".cline/data/settings/cline_mcp_settings.json",
        None,
        ["mcpServers"],
        {"type", "disabled", "autoApprove"},
    ),
}


def read(path: Path) -> Any:
    return (
        tomllib.loads(path.read_text()) if path.suffix == ".toml" else json.loads(path.read_text())
    )


def theirs(path: Path, keys: list[str]) -> str:
    """A file of the user's own: another server under ``keys`` and a setting of theirs."""
    if path.suffix == ".toml":
        return f'# mine\nmodel = "o3"\n\n[{keys[0]}.other]\ncommand = "other-server"\n'
    return json.dumps({"theme": "dark", keys[0]: {"other": {"command": "other-server"}}})


@pytest.mark.parametrize("host", sorted(SHAPES))
def test_each_host_gets_its_entry_in_its_own_shape_and_keeps_the_rest(
    host: str, tmp_path: Path
) -> None:
    """Into the host's own file (user, and project where the host has one): Baton's stdio
    entry in the shape the host reads, with AGENT_ID and the store's settings; the user's
    other servers and settings (and a TOML file's comments) kept; a second run changes
    nothing. A host without project files refuses --project in one line, writing nothing."""
    user_file, project_file, keys, extra = SHAPES[host]
    home, project = tmp_path / "home", tmp_path / "app"
    targets = [(home / user_file, ())] + (
        [(project / project_file, ("--project", str(project)))] if project_file else []
    )
    for path, options in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(theirs(path, keys))
        env = {"HOME": str(home), "BATON_REDIS_URL": "redis://store:6379"}
        first = run_baton("setup", host, *options, env=env)
        assert first.returncode == 0, first.stderr
        data = read(path)
        entry = data[keys[0]]["baton"]
        assert (entry["command"], entry["args"]) == (BATON, ["mcp"])
        assert entry["env"] == {"AGENT_ID": host, "BATON_REDIS_URL": "redis://store:6379"}
        assert set(entry) == {"command", "args", "env"} | extra
        assert data[keys[0]]["other"] == {"command": "other-server"}
        assert data.get("theme") == "dark" or data.get("model") == "o3"
        if path.suffix == ".toml":
            assert path.read_text().startswith("# mine\n")
        again = run_baton("setup", host, *options, env=env)
        assert again.stdout == first.stdout.replace("wrote", "unchanged")
    if project_file is None:
        refused = run_baton("setup", host, "--project", str(project), env={"HOME": str(home)})
        assert refused.returncode == 2 and "no project configuration" in refused.stderr
        assert len(refused.stderr.splitlines()) == 1 and not project.exists()


@pytest.mark.slow
@pytest.mark.parametrize("host", sorted(SHAPES))
async def test_what_each_hosts_file_names_runs(host: str, tmp_path: Path, redis_url: str) -> None:
    """The command, arguments and environment setup wrote for the host start an MCP server
    that lists Baton's tools."""
    user_file, _, keys, _ = SHAPES[host]
    assert setup(host, home=tmp_path).returncode == 0
    entry = read(tmp_path / user_file)[keys[0]]["baton"]
    assert await tools_of(entry["command"], entry["args"], entry["env"], redis_url) == TOOLS


HOST_CLIS = REPO / "tests" / "hosts" / "node_modules" / ".bin"


def host_cli(
    name: str, *args: str, home: Path, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """The host's own CLI (pinned in tests/hosts, installed by make test) in ``cwd`` (by
    default ``home``)."""
    program = HOST_CLIS / name
    assert program.exists(), "run make npm-clients"
    return subprocess.run(
        [str(program), *args],
        env={**os.environ, "HOME": str(home), **env},
        cwd=cwd or home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_gemini_cli_connects_to_the_server_setup_wrote(tmp_path: Path, redis_url: str) -> None:
    """`gemini mcp list` (Gemini CLI 0.61.0, no account) starts what `baton setup gemini`
    wrote and reports it Connected (the folder trusted, as a user trusts theirs)."""
    env = {"HOME": str(tmp_path), "BATON_REDIS_URL": redis_url}
    assert run_baton("setup", "gemini", env=env).returncode == 0
    listed = host_cli("gemini", "mcp", "list", home=tmp_path, GEMINI_CLI_TRUST_WORKSPACE="true")
    assert listed.returncode == 0, listed.stderr
    assert f"baton: {BATON} mcp (stdio) - Connected" in listed.stdout + listed.stderr


@pytest.mark.slow
def test_gemini_hooks_are_what_gemini_makes_of_baton_claude_code_hooks(tmp_path: Path) -> None:
    """The hooks `baton setup gemini` writes are those Gemini CLI's own `gemini hooks migrate
    --from-claude` makes of the hooks `baton setup claude-code` writes (same events, tool
    names and commands), but for PostToolUseFailure, which Gemini CLI does not have."""
    home, claude_side, gemini_side = (tmp_path / name for name in ("home", "a", "b"))
    for folder in (home, claude_side, gemini_side):
        folder.mkdir()
    env = {"HOME": str(home), "BATON_URL": "http://127.0.0.1:8799"}
    assert run_baton("setup", "claude-code", "--project", str(claude_side), env=env).returncode == 0
    assert run_baton("setup", "gemini", "--project", str(gemini_side), env=env).returncode == 0
    migrated = host_cli(
        "gemini",
        "hooks",
        "migrate",
        "--from-claude",
        home=home,
        cwd=claude_side,
        GEMINI_CLI_TRUST_WORKSPACE="true",
    )
    assert migrated.returncode == 0, migrated.stderr
    theirs = json.loads((claude_side / ".gemini" / "settings.json").read_text())["hooks"]
    ours = json.loads((gemini_side / ".gemini" / "settings.json").read_text())["hooks"]
    del theirs["PostToolUseFailure"]
    for groups in ours.values():  # ours name the agent: `baton hook` would say claude-code
        for group in groups:
            command = group["hooks"][0]["command"]
            assert command.startswith("AGENT_ID=gemini ")
            group["hooks"][0]["command"] = command.removeprefix("AGENT_ID=gemini ")
    assert ours == {event: groups for event, groups in theirs.items() if groups}  # not its []


@pytest.mark.slow
def test_codex_lists_the_server_setup_wrote(tmp_path: Path) -> None:
    """`codex mcp list --json` (Codex 0.171.0, no login) reads what `baton setup codex`
    wrote: Baton's stdio server, enabled, with its command, arguments and AGENT_ID."""
    assert run_baton("setup", "codex", env={"HOME": str(tmp_path)}).returncode == 0
    listed = host_cli("codex", "mcp", "list", "--json", home=tmp_path)
    assert listed.returncode == 0, listed.stderr
    [server] = [s for s in json.loads(listed.stdout) if s["name"] == "baton"]
    assert server["enabled"] is True
    transport = server["transport"]
    assert (transport["type"], transport["command"], transport["args"]) == ("stdio", BATON, ["mcp"])
    assert transport["env"] == {"AGENT_ID": "codex"}


def test_setup_list_names_every_host_what_it_gets_and_where_it_is_set_up(tmp_path: Path) -> None:
    """`baton setup --list`: one line per host with what it gets, and where it is set up
    (the project's file, the user's) or the command that sets it up."""
    home, project = tmp_path / "home", tmp_path / "app"
    project.mkdir()
    assert setup("gemini", home=home).returncode == 0
    assert setup("cursor", "--project", str(project), home=home).returncode == 0
    listed = run_baton("setup", "--list", env={"HOME": str(home)}, cwd=project)
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()}
    assert set(lines) == set(HOSTS)
    assert f"user ({home / '.gemini' / 'settings.json'})" in lines["gemini"]
    assert f"project ({project / '.cursor' / 'mcp.json'})" in lines["cursor"]
    assert "not set up: baton setup codex" in lines["codex"]
    assert "hooks (sessions recorded)" in lines["claude-code"]


@pytest.mark.parametrize(
    "written",
    [
        'mcp_servers.other.command = "x"\nmodel = "o3"\n',  # dotted keys
        'mcp_servers = { other = { command = "x" } }\nmodel = "o3"\n',  # an inline table
    ],
)
def test_a_codex_file_where_the_table_cannot_go_is_refused_and_left_alone(
    written: str, tmp_path: Path
) -> None:
    """Codex's servers written as dotted keys or an inline table: adding Baton's table
    there would carry the settings after it into Baton's (tomlkit), so setup refuses in
    one line saying how to write it, and the file stays exactly as it was."""
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(written)
    refused = setup("codex", home=tmp_path)
    assert refused.returncode == 2
    assert len(refused.stderr.splitlines()) == 1 and "[mcp_servers.NAME]" in refused.stderr
    assert config.read_text() == written
