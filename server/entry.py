"""The ``baton`` command's entry point: ``baton hook`` (run by coding agents on every tool
use) and ``baton mcp`` (started by agent hosts, which wait for its first answer) go straight
to their lightweight modules; everything else loads the full CLI."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["hook"]:
        from baton.agents.hook import main as hook

        return hook(arguments[1:])
    if arguments[:1] == ["mcp"] and not {"-h", "--help"} & set(arguments):
        from baton.server.mcp.mcp_stdio import main as mcp  # answers a host before the rest loads

        return mcp(arguments[1:])
    from baton.server.cli import main as cli

    return cli(arguments)


if __name__ == "__main__":
    sys.exit(main())
