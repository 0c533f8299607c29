"""``make compose-check``: compose.yaml on a real Docker engine, checked end to end.

Builds the image, brings the stack up (tokens, two API replicas, worker, executor), runs the
demo's scout, and checks what the always-on executor did: it was warned that listing/553's
pin moved, dropped it, drafted listing/482's application, and moved confidences as the demo
does; every chain verifies. Then it writes through both replicas, kills one in the middle,
and checks that every write acknowledged is there. Tears everything down (``--keep``
leaves it up). ``--cluster`` runs the same on compose.cluster.yaml (a Redis Cluster).

    python tests/compose_check.py [--cluster] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
PROJECT = "batoncheck"
STALE_LINE = "stale: listing/553/assessment was pinned at v1, now at v2"
WRITES = 400  # attempted during the replica check, the kill after a third of them


class CheckFailed(AssertionError):
    """What the stack did is not what the story says."""


def compose_command() -> list[str]:
    """``docker compose`` (v2) when the engine's CLI has it, else ``docker-compose``."""
    has_v2 = shutil.which("docker") and subprocess.run(
        ["docker", "compose", "version"], capture_output=True, check=False
    )
    if has_v2 and has_v2.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise SystemExit("compose-check: neither `docker compose` nor `docker-compose` is installed")


def free_pair() -> str:
    """Two consecutive free host ports for the API replicas, as ``A-B``."""
    for first in range(18765, 19765, 2):
        if all(_free(port) for port in (first, first + 1)):
            return f"{first}-{first + 1}"
    raise SystemExit("compose-check: no two consecutive free ports in 18765-19765")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


class Stack:
    """The compose project under check."""

    def __init__(self, files: Sequence[str], ports: str) -> None:
        self.base = [*compose_command(), "-p", PROJECT, *(arg for f in files for arg in ("-f", f))]
        self.env = {**os.environ, "BATON_PORTS": ports}
        self.ports = [int(port) for port in ports.split("-")]

    def run(self, *args: str, check: bool = True, timeout: float = 900) -> str:
        result = subprocess.run(
            [*self.base, *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise CheckFailed(f"{' '.join(args)} exited {result.returncode}:\n{result.stderr}")
        return result.stdout

    def containers(self, service: str) -> list[str]:
        return self.run("ps", "-q", service).split()


def wait_for(what: str, condition: Callable[[], bool], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if condition():
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise CheckFailed(f"timed out after {seconds:.0f}s waiting for {what}")
        time.sleep(0.5)


def step(text: str) -> None:
    print(f"compose-check: {text}", flush=True)


def check_story(stack: Stack, api: httpx.Client) -> None:
    """The scout hands over (held until its session ends), corrects listing/553, and the
    always-on executor acts on the packet with the warning."""
    step("running the scout")
    scout = stack.run("run", "--rm", "scout", timeout=300)
    if "session ended" not in scout:
        raise CheckFailed(f"the scout did not finish its story:\n{scout}")

    def settled() -> bool:
        packets = api.get("/v1/handoffs").json()["packets"]
        return any(p["from"] == "executor" for p in packets)

    wait_for("the executor to hand back", settled)
    logs = stack.run("logs", "--no-color", "executor")
    expect(STALE_LINE in logs, "the executor was warned: " + STALE_LINE)
    expect(
        "dropping listing/553" in logs, "the executor dropped listing/553 instead of acting on v1"
    )
    expect(
        api.get("/v1/records/listing/553/application").status_code == 404,
        "no application for listing/553",
    )
    drafted = api.get("/v1/records/listing/482/application").json()
    expect(drafted["value"]["status"] == "drafted", "listing/482's application is drafted")
    for ref, wanted in (
        ("listing/482/assessment", 0.84),
        ("source/boards-example/rate-limit", 0.39),
    ):
        confidence = api.get(f"/v1/records/{ref}").json()["confidence"]
        expect(round(confidence, 2) == wanted, f"{ref} confidence is {confidence:.2f}")
    stats = api.get("/v1/stats", params={"verify": "true"}).json()
    expect(stats["broken"] == [], f"every chain verifies ({len(stats['broken'])} broken)")


def check_replica_loss(stack: Stack, token: str) -> None:
    """Eight writers write through both replicas; one replica is killed (SIGKILL) once a
    third of the writes are answered, with others in flight; every write that was
    acknowledged (201) is there afterwards, read through the other replica."""
    doomed_port = stack.ports[0]
    doomed = next(
        cid
        for cid in stack.containers("api")
        if f":{doomed_port}"
        in subprocess.run(
            ["docker", "port", cid, "8765"], capture_output=True, text=True, check=False
        ).stdout
    )
    clients = [client(port, token, timeout=5) for port in stack.ports]
    acknowledged: dict[str, int] = {}
    answered = threading.Semaphore(0)

    def write(n: int) -> None:
        ref = f"compose-check/write-{n}"
        try:
            reply = clients[n % 2].post("/v1/records", json={"ref": ref, "value": n})
            if reply.status_code == 201:
                acknowledged[ref] = n
        except httpx.TransportError:
            pass  # not acknowledged: the writer would retry
        finally:
            answered.release()

    step(f"{WRITES} writes by 8 writers through both replicas, killing one in the middle")
    with ThreadPoolExecutor(8) as pool:
        for n in range(WRITES):
            pool.submit(write, n)
        for _ in range(WRITES // 3):
            answered.acquire()
        subprocess.run(["docker", "kill", doomed], capture_output=True, check=True)
    survivor = clients[1]
    lost = [
        ref
        for ref, value in acknowledged.items()
        if survivor.get(f"/v1/records/{ref}").json().get("value") != value
    ]
    refused = WRITES - len(acknowledged)
    expect(refused > 0, f"{refused} writes were not acknowledged (the killed replica's)")
    expect(
        not lost, f"{len(acknowledged)} writes acknowledged, {len(lost)} of them lost {lost[:5]}"
    )
    for each in clients:
        each.close()


FAILURES: list[str] = []


def expect(ok: bool, text: str) -> None:
    print(f"  {'ok' if ok else 'FAILED'}: {text}", flush=True)
    if not ok:
        FAILURES.append(text)


def client(port: int, token: str, timeout: float = 10) -> httpx.Client:
    return httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {token}", "X-Baton-Agent": "compose-check"},
        timeout=timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compose-check", description=__doc__)
    parser.add_argument("--cluster", action="store_true", help="the Redis Cluster variant")
    parser.add_argument("--keep", action="store_true", help="leave the stack up afterwards")
    args = parser.parse_args(argv)
    files = ["compose.yaml", *(["compose.cluster.yaml"] if args.cluster else [])]
    stack = Stack(files, free_pair())
    started = time.monotonic()
    try:
        step(f"building and starting {' + '.join(files)} (API on ports {stack.ports})")
        stack.run("build")
        stack.run("up", "-d")
        token = stack.run("exec", "-T", "--index", "1", "api", "cat", "/run/baton/admin-token")
        api = client(stack.ports[0], token.strip())
        wait_for(
            "both API replicas",
            lambda: all(
                client(port, token.strip()).get("/readyz").status_code == 200
                for port in stack.ports
            ),
        )
        expect(
            api.get("/v1/whoami").json().get("admin") is True,
            "the bootstrap token is an admin token (no open mode)",
        )
        if args.cluster:
            keys = sum(
                int(stack.run("exec", "-T", node, "redis-cli", "dbsize").strip() or 0)
                for node in ("cluster-1", "cluster-2", "cluster-3")
            )
            expect(keys > 0, f"Baton's data is on the cluster's three nodes ({keys} keys)")
        check_story(stack, api)
        check_replica_loss(stack, token.strip())
    except CheckFailed as error:
        FAILURES.append(str(error))
        print(f"compose-check: {error}", file=sys.stderr)
        print(stack.run("logs", "--no-color", "--tail", "40", check=False), file=sys.stderr)
    finally:
        if not args.keep:
            stack.run("down", "-v", "--remove-orphans", check=False)
    verdict = "passed" if not FAILURES else f"FAILED ({len(FAILURES)})"
    print(f"compose-check {verdict} in {time.monotonic() - started:.0f}s")
    return 0 if not FAILURES else 1


if __name__ == "__main__":
    sys.exit(main())
