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


@pytest.mark.slow
def test_the_wheel_builds_quietly_and_carries_its_data_and_licence(tmp_path: Path) -> None:
    """`pip wheel .` builds with no setuptools warning, and the wheel holds the Lua
    scripts, templates, static files, demo fixtures, the hosts' skill and command files and
    the MIT licence."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    output = built.stdout + built.stderr
    assert "BuildBackendWarning" not in output and "DeprecationWarning" not in output, output
    [wheel] = tmp_path.glob("baton_server-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for wanted in (
        "baton/server/lua/claim_packet.lua",
        "baton/server/templates/base.html",
        "baton/server/static/dashboard.js",
        "baton/demo/fixtures/board.json",
        "baton/agents/integrations/handoff.skill.md",
        "baton/agents/integrations/remember.command.md",
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
