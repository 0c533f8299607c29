"""``make compose-check``: compose.yaml on a real Docker engine, checked end to end.

Builds the image, brings the stack up (tokens, two API replicas behind the load balancer,
worker, executor), runs the demo's scout, and checks what the always-on executor did: it was
warned that listing/553's pin moved, dropped it, drafted listing/482's application, and
moved confidences as the demo does; every chain verifies. Then, all through the load
balancer: REST writes while one replica is killed (every write acknowledged is there); MCP
over HTTP with the SDK's client, many clients at once (every call answered); and the same
while a replica is killed (clients whose call failed initialize again and go on; every
acknowledged write is there). Tears everything down (``--keep`` leaves it up).
``--cluster`` runs the same on compose.cluster.yaml (a Redis Cluster).

    python tests/compose_check.py [--cluster] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
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

import anyio
import httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parent.parent
PROJECT = "batoncheck"
STALE_LINE = "stale: listing/553/assessment was pinned at v1, now at v2"
WRITES = 400  # attempted during the replica check, the kill after a third of them
# SDK clients at once; the writes each makes, and (under a replica's kill, long enough for
# the kill to land mid-run) more
MCP_CLIENTS, MCP_CALLS, MCP_CALLS_KILLED = 10, 20, 150
MCP_CALL_SECONDS = 5  # a call unanswered this long was lost with its replica


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


def free_port() -> int:
    """A free host port for the load balancer."""
    for port in range(18765, 19765):
        if _free(port):
            return port
    raise SystemExit("compose-check: no free port in 18765-19765")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


class Stack:
    """The compose project under check."""

    def __init__(self, files: Sequence[str], port: int) -> None:
        self.base = [*compose_command(), "-p", PROJECT, *(arg for f in files for arg in ("-f", f))]
        self.env = {**os.environ, "BATON_PORT": str(port)}
        self.port = port

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


def check_one_signing_key(api: httpx.Client) -> None:
    """Every replica signs checkpoints and seals audit entries with one key (the volume
    `signing`): the public key is the same whichever replica answers, and a memory
    forgotten through one replica lets the checkpoint the next request (round robin: the
    other replica) takes be signed, twice over."""
    step("checking that the replicas share one signing key")
    keys = {api.get("/v1/checkpoints/key").json()["public_key"] for _ in range(6)}
    expect(len(keys) == 1, f"one public key across the replicas ({len(keys)} seen)")
    for n in range(2):
        saved = api.post("/agentmemory/remember", json={"content": f"compose-check rule {n}"})
        expect(api.post("/v1/checkpoints").status_code == 201, "a checkpoint of the memory")
        forgot = api.post("/v1/forget", json={"memory_id": saved.json()["memory"]["id"]})
        expect(forgot.status_code == 200, f"the memory forgotten ({forgot.status_code})")
        signed = api.post("/v1/checkpoints")
        expect(
            signed.status_code == 201 and signed.json()["forgotten"] == n + 1,
            f"the forget excused by its seal ({signed.text[:200]})",
        )


def replicas_ready(stack: Stack, token: str) -> Callable[[], bool]:
    """Whether both API replicas are up, as the load balancer sees them: a run of /readyz
    through it answered 200 each time (round robin: each replica answers some)."""

    def ready() -> bool:
        if len(stack.containers("api")) != 2:
            return False
        with client(stack.port, token) as api:
            return all(api.get("/readyz").status_code == 200 for _ in range(6))

    return ready


def kill_one_replica(stack: Stack) -> str:
    """SIGKILL one API replica; its container id."""
    doomed = stack.containers("api")[0]
    subprocess.run(["docker", "kill", doomed], capture_output=True, check=True)
    state = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Status}}", doomed],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    expect(state == "exited", f"replica {doomed[:12]} killed (its state: {state})")
    return doomed


def restart_replica(stack: Stack, container: str, token: str) -> None:
    subprocess.run(["docker", "start", container], capture_output=True, check=True)
    wait_for("the killed replica to be back behind the load balancer", replicas_ready(stack, token))


def check_replica_loss(stack: Stack, token: str) -> None:
    """Eight writers write through the load balancer; one replica is killed (SIGKILL) once
    a third of the writes are answered, with others in flight; every write that was
    acknowledged (201) is there afterwards. Then the replica is started again."""
    writer = client(stack.port, token, timeout=5)
    acknowledged: dict[str, int] = {}
    answered = threading.Semaphore(0)

    def write(n: int) -> None:
        ref = f"compose-check/write-{n}"
        try:
            reply = writer.post("/v1/records", json={"ref": ref, "value": n})
            if reply.status_code == 201:
                acknowledged[ref] = n
        except httpx.TransportError:
            pass  # not acknowledged: the writer would retry
        finally:
            answered.release()

    step(f"{WRITES} REST writes by 8 writers through the load balancer, a replica killed")
    with ThreadPoolExecutor(8) as pool:
        for n in range(WRITES):
            pool.submit(write, n)
        for _ in range(WRITES // 3):
            answered.acquire()
        doomed = kill_one_replica(stack)
    with client(stack.port, token) as reader:
        lost = [
            ref
            for ref, value in acknowledged.items()
            if reader.get(f"/v1/records/{ref}").json().get("value") != value
        ]
    expect(
        len(acknowledged) > WRITES // 3,
        f"{len(acknowledged)} of {WRITES} writes acknowledged (any other was in flight on the "
        "killed replica: a 502 from the balancer, not acknowledged)",
    )
    expect(
        not lost, f"{len(acknowledged)} writes acknowledged, {len(lost)} of them lost {lost[:5]}"
    )
    writer.close()
    restart_replica(stack, doomed, token)


class McpRun:
    """SDK clients writing over MCP through the load balancer, each on its own session."""

    def __init__(self, url: str, token: str, label: str, calls: int) -> None:
        self.url, self.token, self.label, self.calls = url, token, label, calls
        self.acknowledged: dict[str, int] = {}
        self.restarts = 0  # sessions opened again after a failed call
        self.errors: list[str] = []

    async def writer(self, n: int) -> None:
        done = 0
        headers = {"Authorization": f"Bearer {self.token}", "X-Baton-Agent": f"mcp-{n}"}
        while done < self.calls and self.restarts <= MCP_CLIENTS * 3:
            try:
                async with httpx.AsyncClient(headers=headers, timeout=10) as http:
                    connection = streamable_http_client(f"{self.url}/mcp", http_client=http)
                    async with Client(connection, mode="legacy") as mcp:
                        while done < self.calls:
                            ref = f"compose-check/{self.label}-{n}-{done}"
                            with anyio.fail_after(MCP_CALL_SECONDS):
                                result = await mcp.call_tool(
                                    "remember", {"ref": ref, "value": done}
                                )
                            if result.is_error:
                                self.errors.append(str(result.content))
                            else:
                                self.acknowledged[ref] = done
                            done += 1
            except Exception:  # the call was not answered: initialize again, write it again
                self.restarts += 1

    async def run(self, after_a_third: Callable[[], object] | None = None) -> None:
        async with anyio.create_task_group() as group:
            for n in range(MCP_CLIENTS):
                group.start_soon(self.writer, n)
            if after_a_third is not None:
                with anyio.fail_after(120):
                    while len(self.acknowledged) < MCP_CLIENTS * self.calls // 3:
                        await anyio.sleep(0.05)
                await anyio.to_thread.run_sync(after_a_third)

    def lost(self, token: str, port: int) -> list[str]:
        with client(port, token) as reader:
            return [
                ref
                for ref, value in self.acknowledged.items()
                if reader.get(f"/v1/records/{ref}").json().get("value") != value
            ]


def check_mcp(stack: Stack, token: str) -> None:
    """MCP over streamable HTTP through the load balancer with the SDK's client: many
    clients at once, every call answered; then again while a replica is killed: clients
    whose call failed initialize again and finish, and every write acknowledged is there."""
    url = f"http://127.0.0.1:{stack.port}"
    step(f"MCP over HTTP: {MCP_CLIENTS} SDK clients x {MCP_CALLS} writes through the balancer")
    calm = McpRun(url, token, "mcp", MCP_CALLS)
    asyncio.run(calm.run())
    total = MCP_CLIENTS * MCP_CALLS
    expect(
        len(calm.acknowledged) == total and calm.restarts == 0 and not calm.errors,
        f"{len(calm.acknowledged)} of {total} MCP calls answered "
        f"({calm.restarts} sessions lost, errors {calm.errors[:2]})",
    )
    step(f"{MCP_CLIENTS} clients x {MCP_CALLS_KILLED} writes while a replica is killed")
    killed: list[str] = []
    rough = McpRun(url, token, "mcp-kill", MCP_CALLS_KILLED)
    asyncio.run(rough.run(lambda: killed.append(kill_one_replica(stack))))
    lost = rough.lost(token, stack.port)
    total = MCP_CLIENTS * MCP_CALLS_KILLED
    expect(
        len(rough.acknowledged) == total and not rough.errors,
        f"every client finished: {len(rough.acknowledged)} of {total} writes acknowledged; "
        f"{rough.restarts} calls were in flight on the killed replica, and each client "
        "initialized again and made its call again",
    )
    expect(not lost, f"{len(lost)} acknowledged MCP writes lost {lost[:5]}")
    if killed:
        restart_replica(stack, killed[0], token)


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
    stack = Stack(files, free_port())
    started = time.monotonic()
    try:
        step(f"building and starting {' + '.join(files)} (load balancer on port {stack.port})")
        stack.run("build")
        stack.run("up", "-d")
        token = stack.run("exec", "-T", "--index", "1", "api", "cat", "/run/baton/admin-token")
        token = token.strip()
        wait_for("both API replicas behind the load balancer", replicas_ready(stack, token))
        api = client(stack.port, token)
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
        check_one_signing_key(api)
        check_replica_loss(stack, token)
        check_mcp(stack, token)
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
