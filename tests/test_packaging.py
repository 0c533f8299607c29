"""The package people install: a wheel that builds without warnings and carries what Baton
reads at run time, a licence, and a version the command reports."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel `pip wheel .` builds from this checkout, and what the build printed."""
    folder = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(folder), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    [wheel] = folder.glob("baton_server-*.whl")
    return wheel, build.stdout + build.stderr


@pytest.mark.slow
def test_the_wheel_builds_quietly_and_carries_its_data_and_licence(
    built: tuple[Path, str],
) -> None:
    """`pip wheel .` builds with no setuptools warning, and the wheel holds the Lua
    scripts, templates, static files (the API viewer with its licence), demo fixtures, the
    hosts' skill and command files and the MIT licence."""
    wheel, output = built
    assert "BuildBackendWarning" not in output and "DeprecationWarning" not in output, output
    names = zipfile.ZipFile(wheel).namelist()
    for wanted in (
        "baton/server/lua/claim_packet.lua",
        "baton/server/templates/base.html",
        "baton/server/static/dashboard.js",
        "baton/server/static/swagger-ui-bundle.js",
        "baton/server/static/swagger-ui-dist-LICENSE.txt",
        "baton/demo/fixtures/board.json",
        "baton/agents/integrations/handoff.skill.md",
        "baton/agents/integrations/remember.command.md",
        "baton/agents/integrations/baton.opencode.js",
    ):
        assert wanted in names, wanted
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)


def test_baton_says_its_version() -> None:
    """`baton --version` prints the package's version, kept in one place (pyproject)."""
    answer = subprocess.run(
        [str(Path(sys.executable).with_name("baton")), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert answer.stdout.strip() == f"baton {version('baton-server')}"


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_environment_outside_the_checkout(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    """The wheel, installed by pip into a new virtual environment, runs from a directory
    that is not the checkout: `baton --version` and `baton status` answer, and the
    installed package reads its Lua scripts from site-packages, not from here."""
    wheel, _ = built
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    # What is left once the machine's own pip set-up (an index folder it lacks, pip's
    # upgrade notice) is set aside: nothing, no setuptools or packaging warning.
    ours = [
        line
        for line in installed.stderr.splitlines()
        if line.strip() and "is ignored: it is neither" not in line and "[notice]" not in line
    ]
    assert ours == [], installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "XDG_DATA_HOME": str(tmp_path / "x")}

    def run(*args: str) -> str:
        done = subprocess.run(
            [str(venv / "bin" / "baton"), *args],
            cwd=elsewhere,
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return done.stdout

    assert run("--version").strip() == f"baton {version('baton-server')}"
    assert '"baton_version"' in run("status")
    located = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import baton.server.runtime.scripts as s; print(s.__file__)",
        ],
        cwd=elsewhere,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert str(venv) in located and str(REPO) not in located
