"""The files a patch names, in the format of Codex's ``apply_patch`` tool (its hooks see the
patch as ``tool_input.command``; no field names the files)."""

from __future__ import annotations

import os
import re

BEGIN = "*** Begin Patch"
FILE_LINE = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.+)$", re.M)


def patched_files(text: object, cwd: object = "") -> list[str]:
    """The files ``text`` adds, updates, deletes or moves to, each once (normalised:
    ``./a`` is ``a``), relative ones from ``cwd`` (when it is a path); [] for anything but
    such a patch."""
    if not isinstance(text, str) or not text.lstrip().startswith(BEGIN):
        return []
    folder = cwd if isinstance(cwd, str) else ""
    return list(
        dict.fromkeys(
            os.path.normpath(os.path.join(folder, name.strip())) for name in FILE_LINE.findall(text)
        )
    )
