"""The `baton` command line against the shared test server, and the package layout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import msgpack
import pytest
import redis

from baton.server.model.keys import Keys
from baton.server.stores.records import RecordStore
from tests.conftest import REPO, handoff_input


def baton(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "baton.server.cli", *args],
        env={**os.environ, "BATON_REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )


@pytest.mark.anyio
async def test_verify_exits_non_zero_naming_the_broken_link(
    store: RecordStore, redis_url: str, sync_redis: redis.Redis
) -> None:
    """`baton verify` passes on intact chains and fails, naming ref and version, on a tampered
    one; --scope limits the check."""
    await store.remember("listing/553/assessment", "apply", agent="scout")
    await store.remember("listing/553/assessment", "maybe", agent="scout")
    await store.remember("other/fact", "x", agent="scout")

    clean = baton(redis_url, "verify")
    assert clean.returncode == 0
    assert "checked 2 records, 3 versions, 0 outcomes: all chains intact" in clean.stdout

    sync_redis.hset(Keys().version("listing/553/assessment", 1), "value", msgpack.packb("skip"))
    broken = baton(redis_url, "verify")
    assert broken.returncode == 1
    assert "BROKEN listing/553/assessment versions #1 (hash)" in broken.stdout
    assert "1 broken link(s)" in broken.stdout
    assert baton(redis_url, "verify", "--scope", "other").returncode == 0


@pytest.mark.anyio
async def test_stats_prints_counts_as_json(store: RecordStore, redis_url: str) -> None:
    """`baton stats` prints the namespace's counts, packets by state included (as
    GET /v1/stats)."""
    await store.remember("a/b", 1, agent="scout")
    await store.remember("a/b", 2, agent="scout")
    await store.ns.handoffs.handoff(handoff_input(to="executor", summary="s"), from_agent="scout")
    stats = json.loads(baton(redis_url, "stats").stdout)
    assert (stats["refs"], stats["versions"], stats["agents"]) == (1, 2, 1)
    assert stats["handoffs"]["queued"] == 1


def test_bad_namespace_is_a_clear_cli_error(redis_url: str) -> None:
    """A malformed namespace is refused with a message, not a traceback."""
    result = baton(redis_url, "stats", "--namespace", "Not Valid")
    assert result.returncode == 2
    assert "namespace" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("BATON_LEASE_SECONDS", "abc"),
        ("BATON_LEASE_SECONDS", "-5"),
        ("BATON_SESSION_IDLE_HOURS", "nan"),
        ("BATON_PORT", "99999"),
        ("BATON_MAX_PINS", "2.5"),
        ("BATON_REDIS_URL", "garbage"),
        ("BATON_RETRY_INTERVALS", "-5,30"),
        ("BATON_RETRY_INTERVALS", "5,soon"),
    ],
)
def test_a_bad_setting_is_named_not_a_traceback(redis_url: str, variable: str, value: str) -> None:
    """A setting that is not a usable value stops the command with one line naming the
    variable (a negative lease used to start, and fail every resume as the caller's fault)."""
    done = subprocess.run(
        [sys.executable, "-m", "baton.server.cli", "stats"],
        env={**os.environ, "BATON_REDIS_URL": redis_url, variable: value},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert variable in done.stderr and "Traceback" not in done.stderr


def test_names_the_cli_cannot_use_are_refused(redis_url: str) -> None:
    """A token scope or an agent's namespace that could never be used, and a handler module
    that does not import, are refused in one line each."""
    for command, word in (
        (["token", "add", "--agent", "x", "--scope", "BAD"], "scope"),
        (["agent", "run", "executor", "--namespace", "BAD", "--burst"], "namespace"),
        (["agent", "run", "executor", "--module", "no_such_handlers_here", "--burst"], "import"),
    ):
        done = baton(redis_url, *command)
        assert done.returncode == 2, done.stderr
        assert word in done.stderr and "Traceback" not in done.stderr


def test_an_unreachable_redis_is_one_line(tmp_path: Path) -> None:
    """Commands and serve against a Redis that does not answer say so in one line."""
    for command in (["stats"], ["serve", "--port", "18999"]):
        done = baton("redis://127.0.0.1:1", *command)
        assert done.returncode == 1, done.stderr
        assert "cannot reach Redis" in done.stderr and "Traceback" not in done.stderr


def test_queue_folder_never_shadows_the_standard_library() -> None:
    """With the repo root first on sys.path, `import queue` is still the standard library's
    and Baton's queue package is reached as baton.queue."""
    assert not (REPO / "queue" / "__init__.py").exists()
    probe = (
        "import queue, sysconfig, baton.queue; from queue import Empty, LifoQueue; "
        "print(queue.__file__.startswith(sysconfig.get_paths()['stdlib']), baton.queue.__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.stdout.split() == ["True", "baton.queue"], result.stderr


def test_every_folder_of_the_design_card_exists() -> None:
    """The top-level layout users and CI rely on is present."""
    for name in (
        "pyproject.toml",
        "server",
        "queue",
        "agents",
        "demo",
        "tests",
        "compose.yaml",
        "README.md",
        "Makefile",
        "docs",
        ".ci/run",
    ):
        assert (REPO / name).exists(), name
    assert Path(REPO / ".ci" / "run").stat().st_mode & 0o111


@pytest.fixture
def data_url(redis_url: str) -> str:
    """The CLI processes here use the plain embedded server, so the store does too."""
    return redis_url


def test_every_command_shows_examples_and_what_it_reads() -> None:
    """`baton COMMAND --help` ends with examples of that very command and the environment
    variables it reads (a command without its guide cannot even build the parser)."""
    from baton.server.cli import GUIDE

    for name in GUIDE.keys() - {"demo"}:  # the demo parses its own options
        shown = subprocess.run(
            [sys.executable, "-m", "baton.server.cli", name, "--help"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        examples = shown.split("examples:\n", 1)[1].split("\n\nreads: ", 1)[0].splitlines()
        assert examples, name
        assert all(f"baton {name}" in example for example in examples), (name, examples)
        reads = shown.split("\n\nreads: ", 1)[1]
        assert "BATON_" in reads or name in ("setup", "completion"), name  # HOME; nothing


def completed(line: str) -> list[str]:
    """What bash completes at the end of ``line``, through the code `baton completion bash`
    prints, sourced into a real bash."""
    script = (
        'source <(baton completion bash); COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; '
        'read -ra COMP_WORDS <<< "$1"; [[ "$1" == *" " ]] && COMP_WORDS+=(""); '
        "COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); "
        '_python_argcomplete baton "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"; '
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        ["bash", "-c", script, "bash", line],
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return sorted(word.strip() for word in done.stdout.splitlines() if word.strip())


def test_bash_completes_commands_subcommands_and_choices() -> None:
    """Sourced into bash, `baton completion bash` completes commands, a command's
    subcommands and an option's choices; zsh and fish get their own code."""
    assert completed("baton se") == ["serve", "setup"]
    subcommands = [word for word in completed("baton token ") if not word.startswith("-")]
    assert subcommands == ["add", "bootstrap", "grant", "grants", "list", "revoke", "ungrant"]
    assert completed("baton --log-format ") == ["auto", "console", "json"]
    for shell, marker in (("zsh", "#compdef baton"), ("fish", "complete --command baton")):
        code = subprocess.run(
            [sys.executable, "-m", "baton.server.cli", "completion", shell],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert marker in code, shell


def test_output_cut_short_by_its_reader_is_no_traceback() -> None:
    """`baton ... | head -1`: when the reader has gone before baton writes, baton stops
    quietly, without a traceback."""
    process = subprocess.Popen(
        [sys.executable, "-m", "baton.server.cli", "completion", "bash"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # long before the interpreter has started and printed
    assert process.wait(60) == 1
    assert process.stderr.read() == ""


def on_a_terminal(redis_url: str, *args: str) -> tuple[str, str]:
    """``baton ARGS`` with stderr on a pseudo-terminal: (stdout, what the terminal showed)."""
    import pty

    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "baton.server.cli", *args],
        stdout=subprocess.PIPE,
        stderr=terminal,
        env={**os.environ, "BATON_REDIS_URL": redis_url},
        cwd=REPO,
    )
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal's other end closed
            break
        if not chunk:
            break
        shown += chunk
    assert process.stdout is not None
    out = process.stdout.read().decode()
    assert process.wait(60) == 0
    os.close(controller)
    return out, shown.decode(errors="replace")


def test_long_commands_draw_a_progress_bar_on_a_terminal_only(
    redis_url: str, http: httpx.Client, tmp_path: Path
) -> None:
    """On a terminal, verify, checkpoint, export and import draw a progress bar on stderr
    while their results go to stdout as usual; off a terminal, their stderr has no bar."""
    for n in range(30):
        http.post("/v1/records", json={"ref": f"progress/r{n}", "value": n})
    dump = tmp_path / "dump.jsonl"
    dump.write_text(baton(redis_url, "export").stdout)
    for args, what in (
        (["verify"], "verifying"),
        (["checkpoint"], "checkpointing"),
        (["export"], "exporting"),
        (["import", "--replace", str(dump)], "importing"),
    ):
        out, shown = on_a_terminal(redis_url, *args)
        assert what in shown and "\x1b[" in shown, args
        assert out.strip(), args
        plain = baton(redis_url, *args)
        assert what not in plain.stderr and "\x1b[" not in plain.stderr, args


def test_off_a_terminal_progress_is_a_plain_line_now_and_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Off a terminal, progress is one plain line per PLAIN_EVERY_SECONDS, with the total
    when it is known."""
    import io

    from baton.server.runtime import progress

    monkeypatch.setattr(progress, "PLAIN_EVERY_SECONDS", 0.0)
    stream = io.StringIO()
    with progress.ProgressReport("importing", "lines", stream=stream) as report:
        report.update(1000, 2500)
        report.update(2000)
    assert stream.getvalue().splitlines() == [
        "baton: importing: 1000/2500 lines",
        "baton: importing: 2000 lines",
    ]
