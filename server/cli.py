"""The ``baton`` command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

import msgspec
import redis.exceptions
import structlog

from baton.agents.host_setup import HOSTS
from baton.server.model.endpoint import token_of
from baton.server.model.errors import BatonError
from baton.server.model.grants import parse_grant
from baton.server.model.models import PACKET_STATES, Stats
from baton.server.model.validation import check_namespace
from baton.server.retrieval.vectors import VectorsUnavailable, vectors_for
from baton.server.runtime.connection import (
    async_redis,
    embedded_server,
    queue_url,
    redis_url,
    write_refused,
)
from baton.server.runtime.embedded import EmbeddedServerError
from baton.server.runtime.logs import (
    LOG_FORMAT_VARIABLE,
    LOG_FORMATS,
    configure_logging,
    log_format_of,
)
from baton.server.runtime.progress import ProgressReport
from baton.server.runtime.settings import Settings
from baton.server.stores.backend import Namespace, open_backend
from baton.server.stores.tokens import TokenStore, new_secret, parse_duration

LOOPBACK = ("127.0.0.1", "localhost", "::1")


PROGRESS_EVERY = 500  # lines between two progress updates of an export


def _check_queue_url(settings: Settings) -> None:
    """Fail before starting anything when RQ would have to run on a Redis Cluster."""
    try:
        queue_url(settings)
    except ValueError as error:
        raise SystemExit(f"baton: {error}") from None


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ValueError as error:
        raise SystemExit(f"baton: {error}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    from baton.server.api.app import APP_FACTORY, create_app
    from baton.server.runtime.serving import PortInUse, check_port, serve, serve_workers

    settings = _settings()
    configure_logging()
    url = redis_url(settings)  # start the embedded server before accepting traffic
    _check_queue_url(settings)
    asyncio.run(_in_namespace(None, _reach))  # an unreachable Redis: one line, not a traceback
    if args.host not in LOOPBACK and not args.insecure_open and not asyncio.run(_tokens_exist()):
        print(
            f"baton: refusing to serve on {args.host} without tokens: anyone who can reach the "
            "port could read and write every agent's memory. Create one first "
            "(baton token add --agent NAME --admin), bind to 127.0.0.1, or pass --insecure-open "
            "to accept that risk.",
            file=sys.stderr,
        )
        return 2
    try:
        check_port(args.host, args.port)
    except PortInUse as error:
        print(f"baton: {error}", file=sys.stderr)
        return 3
    structlog.get_logger("baton.serve").info(
        "serving", url=f"http://{args.host}:{args.port}", redis=url, workers=args.workers
    )
    if args.workers > 1:
        serve_workers(
            APP_FACTORY,
            host=args.host,
            port=args.port,
            workers=args.workers,
            trusted_proxies=settings.trusted_proxies,
        )
    else:
        serve(
            create_app(replace(settings, host=args.host, port=args.port)),
            host=args.host,
            port=args.port,
            trusted_proxies=settings.trusted_proxies,
        )
    return 0


async def _reach(ns: Namespace) -> object:
    return await ns.redis.ping()


async def _tokens_exist() -> bool:
    async def check(ns: Namespace) -> bool:
        return await TokenStore(ns.redis).any()

    result: bool = await _in_namespace(None, check)
    return result


def cmd_token(args: argparse.Namespace) -> int:
    async def run(ns: Namespace) -> Any:
        tokens = TokenStore(ns.redis)
        if args.token_command == "add":
            expires = None if args.expires is None else parse_duration(args.expires)
            issued = await tokens.add(
                args.agent, admin=args.admin, expires_in=expires, scopes=args.scope or None
            )
            print(issued.secret)
            print(
                f"token {issued.token.id} for agent {issued.token.agent}"
                f"{' (admin)' if issued.token.admin else ''}; shown once, store it now",
                file=sys.stderr,
            )
        elif args.token_command == "bootstrap":
            await _bootstrap(tokens, Path(args.file), token_of(os.environ))
        elif args.token_command == "list":
            for token in await tokens.list():
                print(
                    f"{token.id}  {token.agent:<20} {'admin' if token.admin else 'agent':<5}  "
                    f"scopes={','.join(token.scopes)}  created={token.created_at[:19]}  "
                    f"expires={(token.expires_at or 'never')[:19]}  "
                    f"last_used={(token.last_used_at or 'never')[:19]}"
                )
        else:
            await tokens.revoke(args.id)
            print(f"token {args.id} revoked")
        return 0

    if args.token_command in ("grant", "ungrant", "grants"):
        return int(asyncio.run(_in_namespace(args.namespace, lambda ns: _grants(ns, args))))
    result: int = asyncio.run(_in_namespace(None, run))
    return result


async def _grants(ns: Namespace, args: argparse.Namespace) -> int:
    """``baton token grant|ungrant|grants``: an agent's grants in a namespace, added to,
    taken from, or listed."""
    listed = await ns.grants.every()
    if args.token_command != "grants":
        had = next((each.grants for each in listed if each.agent == args.agent), [])
        named = [parse_grant(text) for text in args.grants]
        if args.token_command == "grant":
            kept = had + named
        else:
            gone = {(grant.kind, grant.target) for grant in named}  # read or write alike
            kept = [grant for grant in had if gone and (grant.kind, grant.target) not in gone]
        listed = [await ns.grants.set(args.agent, kept)]
    for each in listed:
        shown = ", ".join(grant.text() for grant in each.grants) or "no grants: not confined"
        print(f"{ns.name}  {each.agent:<20} {shown}")
    return 0


async def _bootstrap(tokens: TokenStore, path: Path, given: str | None) -> None:
    """Make sure the admin token in ``path`` is live: a new one is made (or ``given``, the
    caller's ``BATON_TOKEN``, registered) and written there (mode 0600) when the file does
    not exist; a file's token is registered again only in a store that has no tokens at all
    (a fresh Redis), never over a revoked one. Idempotent: for a deployment's start-up."""
    secret = path.read_text().strip() if path.exists() else given
    if secret and await tokens.check(secret):
        print(f"{path}: its admin token is live", file=sys.stderr)
        return
    if secret and path.exists() and await tokens.any():
        raise SystemExit(
            f"baton token bootstrap: the token in {path} is not live here (revoked or expired); "
            "delete the file to make a new one"
        )
    if not path.exists():  # the file first: a token is live only once someone holds it
        secret = secret or new_secret()
        _write_secret(path, secret)
    issued = await tokens.add("admin", admin=True, secret=secret)
    print(f"{path}: admin token {issued.token.id} is live", file=sys.stderr)


def _write_secret(path: Path, secret: str) -> None:
    """``secret`` in ``path`` (mode 0600), whole or not at all: written beside it, on disk,
    then renamed into place. A failure is one line, and no token is registered."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(secret + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise SystemExit(
            f"baton token bootstrap: cannot write {path} ({error.strerror}); no token was made"
        ) from None


def cmd_completion(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode

    print(shellcode(["baton"], shell=args.shell))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from baton.server.maintenance.backup import dump_lines

    async def run(ns: Namespace) -> int:
        count = 0
        with ProgressReport("exporting", "lines") as progress:
            async for text in dump_lines(ns, args.scope):
                sys.stdout.write(text)
                count += 1
                if count % PROGRESS_EVERY == 0:
                    progress.update(count)
        return count - 1  # the end line

    count = asyncio.run(_in_namespace(args.namespace, run))
    print(f"baton: exported {count} lines", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from baton.server.maintenance.backup import import_dump, namespace_is_empty, read_dump
    from baton.server.maintenance.reindex import reindex

    try:
        with open(args.dump, encoding="utf-8") if args.dump != "-" else sys.stdin as source:
            lines = read_dump(source, sealed=not args.unsealed)  # all checked before writing
    except OSError as error:
        raise SystemExit(f"baton: cannot read {args.dump}: {error}") from None
    except UnicodeDecodeError as error:
        raise SystemExit(
            f"baton: {args.dump} is not UTF-8 text ({error.reason}); nothing was written"
        ) from None

    async def run(ns: Namespace) -> dict[str, int] | None:
        if not await namespace_is_empty(ns) and not (args.replace or args.merge):
            return None
        with ProgressReport("importing", "lines") as progress:
            counts = await import_dump(
                ns,
                lines,
                atomic=True,
                merge=args.merge,
                replace=args.replace,
                on_progress=progress.update,
                index=False,
            )
        with ProgressReport("indexing", "documents") as progress:
            await reindex(ns, progress.update)
        return counts

    counts = asyncio.run(_in_namespace(args.namespace, run))
    if counts is None:
        print(
            "baton: the namespace already holds data; nothing was written. Pass --replace to "
            "delete it first, or --merge to write the dump over it (its records, sessions and "
            "packets replace those with the same ids)",
            file=sys.stderr,
        )
        return 2
    print("baton: imported " + ", ".join(f"{n} {kind}" for kind, n in counts.items()))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    settings = _settings()
    report: dict[str, Any] = {"baton_version": version("baton-server")}
    if settings.redis_url:
        report |= {"redis": settings.redis_url, "embedded": False}
        try:
            report["reachable"] = asyncio.run(_ping(settings.redis_url))
        except Exception as error:
            report["reachable"], report["error"] = False, str(error)
    else:
        report |= {"embedded": True, **embedded_server(settings).status()}
    if report.get("reachable") or report.get("running"):
        report["reindex_needed"] = asyncio.run(_stale_indexes(settings))
    try:
        on = vectors_for(settings.vectors, settings.vector_floor) is not None
        report["vectors"] = "on" if on else f"off (BATON_VECTORS={settings.vectors})"
    except VectorsUnavailable as error:
        report["vectors"] = f"unavailable: {error}"
    print(json.dumps(report, indent=2))
    return 0


async def _stale_indexes(settings: Settings) -> list[str]:
    """The namespaces whose search index other lexical rules built (``baton reindex``)."""
    from baton.server.maintenance.reindex import stale_indexes

    async with open_backend(settings, dispatch=False) as backend:
        return await stale_indexes(backend)


def cmd_forget_namespace(args: argparse.Namespace) -> int:
    from baton.server.maintenance.namespace_removal import forget_namespace

    name = check_namespace(args.name, field="name")
    if not args.yes:
        if not sys.stdin.isatty():
            raise SystemExit(f"baton: pass --yes to delete namespace {name} without a prompt")
        answer = input(f"Delete namespace {name} and everything in it? Type its name: ")
        if answer.strip() != name:
            raise SystemExit("baton: nothing was deleted")
    removed = asyncio.run(_in_namespace(name, forget_namespace))
    print(f"baton: forgot namespace {name}: {removed.keys} keys, {removed.jobs} queued jobs")
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from baton.server.maintenance.reindex import all_namespaces, reindex, stale_indexes

    async def run() -> list[Any]:
        async with open_backend(_settings(), dispatch=False) as backend:
            if args.namespace:
                names = [check_namespace(args.namespace)]
            else:
                names = await (all_namespaces(backend) if args.force else stale_indexes(backend))
            done = []
            for name in names:
                with ProgressReport(f"reindexing {name}", "documents") as progress:
                    done.append(await reindex(backend.namespace(name), progress.update))
            return done

    done = asyncio.run(run())
    for report in done:
        print(
            f"baton: reindexed {report.namespace}: {report.documents} documents, "
            f"{report.removed} no longer stored taken out"
        )
    if not done:
        print("baton: every search index is current; --force rebuilds them anyway")
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


async def _in_namespace(namespace: str | None, action: Callable[[Namespace], Any]) -> Any:
    settings = _settings()
    async with open_backend(settings) as backend:
        return await action(backend.namespace(namespace or settings.namespace))


def cmd_stats(args: argparse.Namespace) -> int:
    async def counted(ns: Namespace) -> Stats:
        stats = await ns.verifier.stats(scope=args.scope)
        stats.handoffs = await ns.handoffs.counts()  # as GET /v1/stats has them
        return stats

    stats = asyncio.run(_in_namespace(args.namespace, counted))
    print(msgspec.json.format(msgspec.json.encode(stats)).decode())
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    async def run(ns: Namespace) -> Any:
        with ProgressReport("verifying", "records") as progress:
            return await ns.verifier.stats(
                verify=True, scope=args.scope, on_progress=progress.update
            )

    findings = 0
    if args.checkpoint:
        findings = asyncio.run(
            _in_namespace(
                args.namespace,
                lambda ns: _verify_checkpoint(ns, args.checkpoint, args.public_key),
            )
        )
    stats = asyncio.run(_in_namespace(args.namespace, run))
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
    return 1 if broken or findings else 0


async def _verify_checkpoint(ns: Namespace, which: str, public_key: str | None) -> int:
    """Print the comparison with a checkpoint (``latest`` or an export file); the number
    of problems found."""
    from baton.server.maintenance.checkpoints import parse_export

    checkpoints = _checkpoints(ns)
    if which == "latest":
        exported = await checkpoints.export()
    else:
        try:
            with open(which, encoding="utf-8") as source:
                exported = parse_export(source.read())
        except OSError as error:
            raise SystemExit(f"baton: cannot read the checkpoint {which}: {error}") from None
    report = await checkpoints.verify(exported, public_key)
    problems = len(report.findings)
    if not report.signature_ok:
        print(
            f"BROKEN checkpoint {report.checkpoint}: its signature does not verify with the "
            f"trusted key {report.key_id}"
            + ("" if report.embedded_key_trusted else " (it carries another key)")
        )
        problems += 1
    if not report.leaves_ok:
        print(f"BROKEN checkpoint {report.checkpoint}: its leaves do not add up to its root")
        problems += 1
    if report.rolled_back:
        print(f"BROKEN checkpoints rolled back: {report.rolled_back}")
        problems += 1
    for finding in report.findings:
        print(f"BROKEN {finding.ref} {finding.kind}: {finding.detail}")
    for ref in report.forgotten_since:
        print(f"forgotten since (audited): {ref}")
    print(
        f"checkpoint {report.checkpoint}: {report.checked} records checked, "
        f"{report.new_since} new since, "
        + ("nothing missing, behind or changed" if not problems else f"{problems} problem(s)")
    )
    return problems


def _checkpoints(ns: Namespace) -> Any:
    """The namespace's checkpoints with this installation's signing key and seen marks."""
    from baton.server.maintenance.checkpoints import CheckpointStore, SeenCheckpoints
    from baton.server.runtime.signing import load_signing_key

    settings = _settings()
    try:
        key = load_signing_key(settings)
    except ValueError as error:
        raise SystemExit(f"baton: {error}") from None
    return CheckpointStore(ns, key, SeenCheckpoints.of(settings.data_dir))


def cmd_checkpoint(args: argparse.Namespace) -> int:
    async def run(ns: Namespace) -> str:
        checkpoints = _checkpoints(ns)
        if args.export:
            return msgspec.json.encode(await checkpoints.export()).decode()
        with ProgressReport("checkpointing", "records") as progress:
            taken = await checkpoints.take(force=args.force, on_progress=progress.update)
        assert taken is not None
        return (
            f"checkpoint {taken.seq} of {taken.namespace}: {taken.records} records, "
            f"root {taken.root[:16]}…, signed by key {taken.key_id}"
        )

    print(asyncio.run(_in_namespace(args.namespace, run)))
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from baton.server.mcp.mcp_stdio import main as serve_stdio

    return serve_stdio(["--agent", args.agent] if args.agent else [])


def cmd_hook(args: argparse.Namespace) -> int:
    from baton.agents.hook import main as hook

    return hook([*(["--check"] if args.check else []), *([args.event] if args.event else [])])


def cmd_doctor(args: argparse.Namespace) -> int:
    from baton.agents.doctor import examine

    findings = list(examine(_settings(), os.environ, Path.home(), Path.cwd()))
    for finding in findings:
        print(finding)
    return 1 if any(finding.level == "FAIL" for finding in findings) else 0


def cmd_setup(args: argparse.Namespace) -> int:
    from baton.agents.host_setup import DEFAULT_AGENTS, apply, describe, plan

    if args.list:
        for line in describe(Path.home(), Path.cwd()):
            print(line)
        return 0
    if args.host is None:
        raise SystemExit(f"baton: name a host ({', '.join(HOSTS)}) or pass --list")
    project = None if args.project is None else Path(args.project).resolve()
    changes = plan(
        args.host,
        baton=args.command or _own_command(),
        agent=args.agent or DEFAULT_AGENTS[args.host],
        home=Path.home(),
        project=project,
        environ=dict(os.environ),
    )
    if not args.dry_run:
        apply(changes)  # every file, or (one line of error) none
    for change in changes:
        if args.dry_run:
            print(change.diff() if change.changed else f"unchanged {change.path}\n", end="")
        else:
            print(f"{'wrote' if change.changed else 'unchanged'} {change.path}")
    if args.host == "codex" and project is not None:
        from baton.agents import codex_trust
        from baton.agents.host_setup import MCP_FILES, read_config

        user_config = MCP_FILES["codex"].user(Path.home())
        if not codex_trust.project_trusted(read_config(user_config), project):
            print(f"note: {codex_trust.untrusted_project(project, user_config)}")
    return 0


def _own_command() -> str:
    """This installation's ``baton``, by absolute path (agent hosts may not share PATH)."""
    beside = Path(sys.executable).with_name("baton")
    return str(beside) if beside.exists() else shutil.which("baton") or "baton"


def cmd_worker(args: argparse.Namespace) -> int:
    from baton.queue.worker import run_maintenance

    configure_logging()
    settings = _settings()
    _check_queue_url(settings)
    run_maintenance(settings, burst=args.burst)
    return 0


def cmd_agent_run(args: argparse.Namespace) -> int:
    from baton.queue.worker import AgentNotRegistered, run_agent

    configure_logging()
    settings = _settings()
    if args.namespace:
        settings = replace(settings, namespace=check_namespace(args.namespace))
    _check_queue_url(settings)
    modules = list(args.module) + [
        module for module in os.environ.get("BATON_AGENT_MODULES", "").split(",") if module
    ]
    try:
        run_agent(settings, args.name, modules, burst=args.burst)
    except AgentNotRegistered as error:
        print(f"baton: {error}", file=sys.stderr)
        return 2
    except ImportError as error:
        print(f"baton: cannot import a handler module: {error}", file=sys.stderr)
        return 2
    return 0


def cmd_handoffs(args: argparse.Namespace) -> int:

    async def run(ns: Namespace) -> Any:
        return await ns.handoffs.list(status=args.status, to_agent=args.to, limit=args.limit)

    page = asyncio.run(_in_namespace(args.namespace, run))
    if not page.packets:
        print("no handoffs" + (f" in state {args.status}" if args.status else ""))
        return 0
    rows = [("ID", "STATE", "FROM", "TO", "PINS", "CREATED", "SUMMARY")]
    rows += [
        (
            p.id,
            p.state,
            p.from_agent,
            p.to_agent,
            str(len(p.pins)),
            p.created_at[:19],
            p.summary if len(p.summary) <= 50 else p.summary[:47] + "...",
        )
        for p in page.packets
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[-1]
        )
    return 0


STORE_ENV = (
    "BATON_REDIS_URL (a Redis or Redis Cluster; unset: the embedded Valkey of "
    "BATON_DATA_DIR), BATON_NAMESPACE"
)
API_ENV = "BATON_URL (default http://127.0.0.1:8765), BATON_TOKEN (or BATON_TOKEN_FILE)"
# Each command's examples and the environment it reads, shown by `baton COMMAND --help`.
GUIDE: dict[str, tuple[list[str], str]] = {
    "serve": (
        ["baton serve", "baton serve --host 0.0.0.0 --port 8765 --workers 2"],
        f"{STORE_ENV}, BATON_HOST, BATON_PORT, BATON_RATE_LIMIT, BATON_AUTH_FAILURES",
    ),
    "status": (["baton status"], STORE_ENV),
    "down": (["baton down"], "BATON_DATA_DIR"),
    "mcp": (
        ["baton mcp --agent scout", "AGENT_ID=executor baton mcp"],
        f"AGENT_ID, {STORE_ENV}, MEMORY_DB",
    ),
    "demo": (
        ["baton demo", "baton demo --keep", "baton demo --amfs", "baton demo --langgraph"],
        STORE_ENV,
    ),
    "token": (
        [
            "baton token add --agent scout",
            "baton token add --agent ops --admin",
            "baton token list",
            "baton token revoke tok_1a2b3c4d",
            "baton token bootstrap --file /run/baton/admin-token",
            "baton token grant intern records:docs/ memories:web=write --namespace team-a",
            "baton token ungrant intern --namespace team-a",
        ],
        "BATON_REDIS_URL",
    ),
    "completion": (
        [
            'eval "$(baton completion bash)"    # in ~/.bashrc',
            'eval "$(baton completion zsh)"     # in ~/.zshrc, after compinit',
            "baton completion fish | source     # in ~/.config/fish/config.fish",
        ],
        "none",
    ),
    "export": (["baton export > dump.jsonl"], STORE_ENV),
    "import": (["baton import dump.jsonl", "baton import --replace dump.jsonl"], STORE_ENV),
    "hook": (["echo '{...}' | baton hook PostToolUse", "baton hook --check"], API_ENV),
    "doctor": (["baton doctor"], f"{STORE_ENV}, {API_ENV}"),
    "setup": (["baton setup claude-code", "baton setup opencode --project --dry-run"], "HOME"),
    "worker": (["baton worker", "baton worker --burst"], STORE_ENV),
    "agent": (["baton agent run executor --module my_agents"], STORE_ENV),
    "handoffs": (["baton handoffs", "baton handoffs --status failed --to executor"], STORE_ENV),
    "stats": (["baton stats", "baton stats --scope listing"], STORE_ENV),
    "verify": (
        [
            "baton verify",
            "baton verify --checkpoint latest",
            "baton verify --checkpoint saved.json --public-key BASE64",
        ],
        f"{STORE_ENV}, BATON_SIGNING_KEY",
    ),
    "checkpoint": (
        ["baton checkpoint", "baton checkpoint --export > checkpoint.json"],
        f"{STORE_ENV}, BATON_SIGNING_KEY",
    ),
    "reindex": (["baton reindex", "baton reindex --namespace team-a"], STORE_ENV),
    "forget-namespace": (
        ["baton forget-namespace demo-20261207-101500-ab12", "baton forget-namespace old --yes"],
        STORE_ENV,
    ),
}
OVERVIEW = """\
start here:
  baton doctor                  check the setup and say what to fix
  make demo / baton demo        watch two agents hand work over
  baton setup claude-code       connect an agent host (or: opencode)
  baton completion bash         tab completion (or: zsh, fish)

environment: BATON_REDIS_URL, BATON_DATA_DIR, BATON_URL, BATON_TOKEN, AGENT_ID,
BATON_LOG_FORMAT; every setting in docs/operations.md. `baton COMMAND --help` shows examples."""


def _guided(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Give every command its examples and environment (:data:`GUIDE`)."""
    for name, sub in commands.choices.items():
        examples, environment = GUIDE[name]
        sub.formatter_class = argparse.RawDescriptionHelpFormatter
        sub.epilog = (
            "examples:\n"
            + "\n".join(f"  {line}" for line in examples)
            + (f"\n\nreads: {environment}")
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="baton",
        description="Shared, versioned memory and handoffs for AI agents.",
        epilog=OVERVIEW,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"baton {version('baton-server')}")
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=None,
        help="how every process started logs on stderr: json lines, console lines, or auto "
        "(console on a terminal; the default, or BATON_LOG_FORMAT)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the REST API (embedded Redis by default)")
    defaults = Settings()
    serve.add_argument("--host", default=None, help=f"bind address (default {defaults.host})")
    serve.add_argument("--port", type=int, default=None, help=f"port (default {defaults.port})")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="API processes sharing the port and the Redis (default 1; about one per core)",
    )
    serve.add_argument(
        "--insecure-open",
        action="store_true",
        help="serve a non-loopback address without tokens (anyone reaching the "
        "port can read and write everything)",
    )
    serve.set_defaults(handler=cmd_serve)

    commands.add_parser("status", help="what runs where").set_defaults(handler=cmd_status)
    commands.add_parser("down", help="stop the embedded Redis server").set_defaults(
        handler=cmd_down
    )

    mcp = commands.add_parser(
        "mcp", help="serve the MCP tools on stdio (for Claude Code, Cursor, ...)"
    )
    mcp.add_argument("--agent", default=None, help="this agent's id (default: $AGENT_ID)")
    mcp.set_defaults(handler=cmd_mcp)

    # Listed for --help only: main() hands "baton demo ..." to the demo's own parser.
    commands.add_parser(
        "demo", help="run the scout/executor demo (--keep, --write-transcript, --amfs, --langgraph)"
    )

    token = commands.add_parser(
        "token", help="manage API tokens and grants (add, bootstrap, list, revoke, grant)"
    )
    token_commands = token.add_subparsers(dest="token_command", required=True)
    add = token_commands.add_parser("add", help="create a token; its secret is printed once")
    add.add_argument("--agent", required=True, help="the agent the token acts as")
    add.add_argument("--admin", action="store_true", help="may act as any agent and requeue")
    add.add_argument("--expires", default=None, help="lifetime such as 30d, 12h (default never)")
    add.add_argument(
        "--scope",
        action="append",
        default=[],
        help="namespace the token may use; repeatable (default all)",
    )
    bootstrap = token_commands.add_parser(
        "bootstrap",
        help="make sure FILE holds a live admin token (written once: BATON_TOKEN, or a new "
        "one); for a deployment's start-up",
    )
    bootstrap.add_argument("--file", required=True, help="where the token is kept (mode 0600)")
    token_commands.add_parser("list", help="tokens, without their secrets")
    revoke = token_commands.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("id")
    rule = "records:PREFIX, memories:PROJECT or packets:AGENT, then =read (default) or =write"
    grant = token_commands.add_parser(
        "grant", help="confine an agent to what its grants cover, in one namespace"
    )
    grant.add_argument("agent")
    grant.add_argument("grants", nargs="+", metavar="GRANT", help=rule)
    ungrant = token_commands.add_parser(
        "ungrant", help="take grants from an agent (all of them, without GRANT: not confined)"
    )
    ungrant.add_argument("agent")
    ungrant.add_argument("grants", nargs="*", metavar="GRANT", help=rule)
    listing = token_commands.add_parser("grants", help="the agents with grants, and what they are")
    for sub in (grant, ungrant, listing):
        sub.add_argument("--namespace", default=None, help="default: BATON_NAMESPACE or 'default'")
    token.set_defaults(handler=cmd_token)

    completion = commands.add_parser(
        "completion", help="print the shell code that completes baton's commands and options"
    )
    completion.add_argument("shell", choices=["bash", "zsh", "fish"])
    completion.set_defaults(handler=cmd_completion)

    dump = commands.add_parser("export", help="write a namespace as JSON lines to stdout")
    dump.add_argument("--scope", default=None, help="only records in this scope and below")
    dump.add_argument("--namespace", default=None)
    dump.set_defaults(handler=cmd_export)
    load = commands.add_parser("import", help="verify a dump's chains, then load it")
    load.add_argument("dump", help="the file written by baton export, or - for stdin")
    load.add_argument("--namespace", default=None)
    into = load.add_mutually_exclusive_group()
    into.add_argument(
        "--replace",
        action="store_true",
        help="swap what the namespace holds for the dump (all or nothing on one Redis)",
    )
    into.add_argument(
        "--merge",
        action="store_true",
        help="write over what the namespace holds (same ids are replaced)",
    )
    load.add_argument(
        "--unsealed",
        action="store_true",
        help="accept a dump without its end line (made before Baton wrote one); "
        "a dump cut short is then not detected",
    )
    load.set_defaults(handler=cmd_import)

    hook = commands.add_parser("hook", help="record a Claude Code hook event (JSON on stdin)")
    hook.add_argument(
        "event",
        nargs="?",
        default="",
        help="PostToolUse, UserPromptSubmit, ... or post_tool_use, ...",
    )
    hook.add_argument(
        "--check",
        action="store_true",
        help="say whether Baton is reachable and accepts BATON_TOKEN, then exit",
    )
    hook.set_defaults(handler=cmd_hook)

    commands.add_parser(
        "doctor",
        help="check the setup end to end (store, API, token, agent hosts) and say what to fix",
    ).set_defaults(handler=cmd_doctor)
    setup = commands.add_parser(
        "setup", help="connect an agent host: MCP server, hooks, skills and commands"
    )
    setup.add_argument("host", nargs="?", choices=HOSTS, help="the agent host to connect")
    setup.add_argument(
        "--list", action="store_true", help="list the hosts, what each gets, and which are set up"
    )
    setup.add_argument(
        "--project",
        nargs="?",
        const=".",
        metavar="DIR",
        help="write into this project (default: the current directory) instead of your user "
        "configuration",
    )
    setup.add_argument("--dry-run", action="store_true", help="show the changes, write nothing")
    setup.add_argument("--agent", help="the AGENT_ID the MCP server acts as (default: the host)")
    setup.add_argument("--command", help="the baton command to run (default: this one's path)")
    setup.set_defaults(handler=cmd_setup)

    worker = commands.add_parser("worker", help="run the periodic sweeps (leases, expiry, repair)")
    worker.add_argument("--burst", action="store_true", help="sweep once and exit")
    worker.set_defaults(handler=cmd_worker)

    agent = commands.add_parser("agent", help="run an agent's handler on its queue")
    agent_commands = agent.add_subparsers(dest="agent_command", required=True)
    run = agent_commands.add_parser("run", help="start an RQ worker on NAME's queue")
    run.add_argument("name", help="the agent id whose packets to handle")
    run.add_argument(
        "--module",
        "-m",
        action="append",
        default=[],
        help="module that registers the handler with @agent(NAME); repeatable",
    )
    run.add_argument("--burst", action="store_true", help="handle what is queued, then exit")
    run.add_argument("--namespace", default=None, help="default: BATON_NAMESPACE or 'default'")
    run.set_defaults(handler=cmd_agent_run)

    handoffs = commands.add_parser("handoffs", help="list handoff packets as a table")
    handoffs.add_argument("--status", choices=PACKET_STATES)
    handoffs.add_argument("--to", default=None, help="only packets for this agent")
    handoffs.add_argument("--limit", type=int, default=50)
    handoffs.add_argument("--namespace", default=None)
    handoffs.set_defaults(handler=cmd_handoffs)

    for name, handler, text in (
        ("stats", cmd_stats, "counts and average confidence"),
        ("verify", cmd_verify, "recompute every hash chain; exit 1 on any broken link"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--scope", default=None, help="only records in this scope and below")
        sub.add_argument("--namespace", default=None, help="default: BATON_NAMESPACE or 'default'")
        sub.set_defaults(handler=handler)
        if name == "verify":
            sub.add_argument(
                "--checkpoint",
                default=None,
                metavar="FILE|latest",
                help="also compare with a checkpoint: records missing, cut short or changed since",
            )
            sub.add_argument(
                "--public-key",
                default=None,
                metavar="BASE64",
                help="verify the checkpoint's signature with this Ed25519 public key (default: "
                "this installation's signing key; never the key the export carries)",
            )

    checkpoint = commands.add_parser("checkpoint", help="take a signed checkpoint (or --export)")
    checkpoint.add_argument(
        "--export",
        action="store_true",
        help="print the latest checkpoint and its leaves as one JSON line",
    )
    checkpoint.add_argument(
        "--force",
        action="store_true",
        help="sign even though the store lost what the previous checkpoint held or its "
        "checkpoints were rolled back (after you looked into it)",
    )
    checkpoint.add_argument("--namespace", default=None)
    checkpoint.set_defaults(handler=cmd_checkpoint)

    rebuild = commands.add_parser(
        "reindex", help="rebuild search indexes built by older lexical rules (all namespaces)"
    )
    rebuild.add_argument("--namespace", default=None, help="only this namespace (rebuilt always)")
    rebuild.add_argument("--force", action="store_true", help="rebuild every index, current or not")
    rebuild.set_defaults(handler=cmd_reindex)

    drop = commands.add_parser(
        "forget-namespace",
        help="delete a namespace and everything in it (its slot of the namespace quotas "
        "is free again)",
    )
    drop.add_argument("name", help="the namespace to delete")
    drop.add_argument("--yes", action="store_true", help="do not ask: delete it (for scripts)")
    drop.set_defaults(handler=cmd_forget_namespace)
    _guided(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["demo"]:  # the demo parses its own options
        from baton.demo.run import main as demo

        return demo(arguments[1:])
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # a shell asks for completions (`baton completion`)
        import argcomplete

        argcomplete.autocomplete(parser)  # writes them and exits
    if not arguments:  # bare `baton`: the overview, not an error
        parser.print_help()
        return 0
    args = parser.parse_args(arguments)
    if args.log_format:  # the environment carries it to the processes this one starts
        os.environ[LOG_FORMAT_VARIABLE] = args.log_format
    try:
        log_format_of(os.environ.get(LOG_FORMAT_VARIABLE))
    except ValueError as error:
        parser.error(str(error))
    if args.command == "serve":
        settings = _settings()
        args.host = args.host or settings.host
        args.port = args.port or settings.port
        if args.workers < 1:
            parser.error("--workers must be 1 or more")
        if not 0 < args.port <= 65535:
            parser.error("--port must be from 1 to 65535")
    try:
        result: int = args.handler(args)
    except (BatonError, EmbeddedServerError, VectorsUnavailable) as error:
        print(f"baton: {error}", file=sys.stderr)
        return 2
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
        print(f"baton: cannot reach Redis ({error}); check BATON_REDIS_URL", file=sys.stderr)
        return 1
    except redis.exceptions.ResponseError as error:
        if (refused := write_refused(error)) is None:
            raise
        print(f"baton: {refused[1]}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `baton export | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 1
    return result


if __name__ == "__main__":
    sys.exit(main())
