"""The ``baton`` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from baton.server.errors import BatonError
from baton.server.connection import async_redis, embedded_server, redis_url
from baton.server.logs import configure_logging
from baton.server.settings import Settings
from baton.server.store import Backend, FactStore

def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ValueError as error:
        raise SystemExit(f"baton: {error}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from baton.server.api.app import create_app

    settings = _settings()
    configure_logging()
    url = redis_url(settings)  # start the embedded server before accepting traffic
    print(f"baton: serving http://{args.host}:{args.port} (redis: {url})", file=sys.stderr)
    uvicorn.run(
        create_app(settings), host=args.host, port=args.port, access_log=False, log_config=None
    )
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    settings = _settings()
    if settings.redis_url:
        report: dict[str, Any] = {"redis": settings.redis_url, "embedded": False}
        try:
            report["reachable"] = asyncio.run(_ping(settings.redis_url))
        except Exception as error:  # noqa: BLE001 - any failure to reach it is the answer
            report["reachable"], report["error"] = False, str(error)
    else:
        report = {"embedded": True, **embedded_server(settings).status()}
    print(json.dumps(report, indent=2))
    return 0


async def _ping(url: str) -> bool:
    client = async_redis(url)
    try:
        return bool(await client.ping())
    finally:
        await client.aclose()


def cmd_down(args: argparse.Namespace) -> int:
    settings = _settings()
    if settings.redis_url:
        print("baton: BATON_REDIS_URL is set; Baton started no server, so stops none")
        return 0
    stopped = embedded_server(settings).stop()
    print("baton: embedded server stopped" if stopped else "baton: no embedded server running")
    return 0


async def _with_store(namespace: str | None, action: Callable[[FactStore], Any]) -> Any:
    settings = _settings()
    client = async_redis(redis_url(settings))
    try:
        return await action(Backend(client, settings.limits).store(namespace or settings.namespace))
    finally:
        await client.aclose()


def cmd_stats(args: argparse.Namespace) -> int:
    stats = asyncio.run(_with_store(args.namespace, lambda store: store.stats(scope=args.scope)))
    print(msgspec.json.format(msgspec.json.encode(stats)).decode())
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty():
            width = 30
            filled = width * done // max(total, 1)
            bar = "#" * filled + "." * (width - filled)
            print(f"\rverifying [{bar}] {done}/{total} records", end="", file=sys.stderr)

    async def run(store: FactStore) -> Any:
        return await store.stats(verify=True, scope=args.scope, on_progress=progress)

    stats = asyncio.run(_with_store(args.namespace, run))
    if sys.stderr.isatty():
        print(file=sys.stderr)
    broken = stats.broken or []
    for link in broken:
        print(
            f"BROKEN {link.ref} {link.chain} #{link.version} ({link.kind}): "
            f"expected {link.expected}, found {link.found}"
        )
    print(
        f"checked {stats.refs} records, {stats.checked_versions} versions, "
        f"{stats.checked_outcomes} outcomes: "
        + ("all chains intact" if not broken else f"{len(broken)} broken link(s)")
    )
    return 1 if broken else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="baton", description="Shared, versioned memory and handoffs for AI agents."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the REST API (embedded Redis by default)")
    defaults = Settings()
    serve.add_argument("--host", default=None, help=f"bind address (default {defaults.host})")
    serve.add_argument("--port", type=int, default=None, help=f"port (default {defaults.port})")
    serve.set_defaults(handler=cmd_serve)

    commands.add_parser("status", help="what runs where").set_defaults(handler=cmd_status)
    commands.add_parser("down", help="stop the embedded Redis server").set_defaults(
        handler=cmd_down
    )

    for name, handler, text in (
        ("stats", cmd_stats, "counts and average confidence"),
        ("verify", cmd_verify, "recompute every hash chain; exit 1 on any broken link"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--scope", default=None, help="only records in this scope and below")
        sub.add_argument("--namespace", default=None, help="default: BATON_NAMESPACE or 'default'")
        sub.set_defaults(handler=handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        settings = _settings()
        args.host = args.host or settings.host
        args.port = args.port or settings.port
    try:
        result: int = args.handler(args)
    except BatonError as error:
        print(f"baton: {error.detail}", file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    sys.exit(main())
