"""The demo's transcript format: numbered sections under ``---`` rules, one ``.`` bullet per
event, at most 76 columns, colour only on a terminal."""

from __future__ import annotations

import os
import re
import sys
import textwrap

WIDTH = 76
COLOUR_ENV = "BATON_DEMO_COLOUR"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def colour_enabled() -> bool:
    """Colour on a terminal, or when the parent demo process says its terminal is one."""
    if os.environ.get("NO_COLOR"):
        return False
    return os.environ.get(COLOUR_ENV) == "1" or sys.stdout.isatty()


def _paint(text: str, code: str) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if colour_enabled() else text


def section(title: str) -> None:
    """``--- 1. pick up whatever is waiting -----…`` padded to the transcript width."""
    head = f"--- {title} "
    print("\n" + _paint(head + "-" * max(WIDTH - len(head), 3), "1;36"), flush=True)


def bullet(text: str, tone: str = "") -> None:
    """One event: ``  . text``, wrapped under itself. tone: "warn", "good" or ""."""
    codes = {"warn": "33", "good": "32", "bad": "31"}
    lines = textwrap.wrap(text, WIDTH - 4, break_on_hyphens=False) or [""]
    first = _paint(lines[0], codes[tone]) if tone else lines[0]
    print(f"  . {first}", flush=True)
    for line in lines[1:]:
        print(f"    {_paint(line, codes[tone]) if tone else line}", flush=True)


def plain(text: str) -> str:
    """The transcript without colour codes, for files."""
    return ANSI.sub("", text)
