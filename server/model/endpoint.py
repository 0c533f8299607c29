"""Where agents reach the API and where Baton keeps its files, from the environment.
Standard library only: ``baton hook`` reads it on every tool use, without the rest of the
settings."""

from __future__ import annotations

import os
from collections.abc import Mapping

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MEMORY_DB_SUFFIX = ".baton"  # MEMORY_DB=x.db keeps Baton's store in x.db.baton/


def base_url(api_url: str | None, host: str, port: int) -> str:
    """``BATON_URL`` when set, else the API's own host and port."""
    return api_url or f"http://{host}:{port}"


def base_url_of(environ: Mapping[str, str]) -> str:
    """:func:`base_url` from ``BATON_URL``, ``BATON_HOST`` and ``BATON_PORT``."""
    return base_url(
        environ.get("BATON_URL") or None,
        environ.get("BATON_HOST", DEFAULT_HOST),
        int(environ.get("BATON_PORT", DEFAULT_PORT)),
    )


def data_dir_of(environ: Mapping[str, str]) -> str:
    """``BATON_DATA_DIR``; else, for agent-handoff-memory's configurations, the store its
    ``MEMORY_DB`` names: the folder ``<MEMORY_DB>.baton`` beside that path (the processes
    given one ``MEMORY_DB`` share one store, as they shared one SQLite file); else the
    per-user data dir: ``$XDG_DATA_HOME/baton``, i.e. ``~/.local/share/baton`` (absolute,
    ``~`` expanded)."""
    chosen = environ.get("BATON_DATA_DIR")
    if chosen:
        return os.path.abspath(os.path.expanduser(chosen))
    memory_db = environ.get("MEMORY_DB")
    if memory_db:
        return os.path.abspath(os.path.expanduser(memory_db)) + MEMORY_DB_SUFFIX
    xdg = environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(xdg, "baton")


def token_of(environ: Mapping[str, str]) -> str | None:
    """The token agents send: ``BATON_TOKEN``, else the first line of the file
    ``BATON_TOKEN_FILE`` names (a secret mounted in a container, say); None for neither.
    A named file that cannot be read is a ValueError saying so."""
    if environ.get("BATON_TOKEN"):
        return environ["BATON_TOKEN"]
    path = environ.get("BATON_TOKEN_FILE")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as source:
            token = source.readline().strip()
    except OSError as error:
        raise ValueError(f"BATON_TOKEN_FILE {path}: {error.strerror or error}") from None
    if not token:
        raise ValueError(f"BATON_TOKEN_FILE {path} is empty")
    return token
