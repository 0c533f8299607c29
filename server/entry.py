"""The ``baton`` command's entry point: ``baton hook`` (run by coding agents on every tool
use) goes straight to its lightweight module; everything else loads the full CLI."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["hook"]:
        from baton.agents.hook import main as hook

        return hook(arguments[1:])
    from baton.server.cli import main as cli

    return cli(arguments)


if __name__ == "__main__":
    sys.exit(main())
