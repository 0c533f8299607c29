"""A whole API server on a Redis Cluster, with RQ on a separate plain Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import REPO, running_server


@pytest.mark.slow
def test_api_on_a_cluster_with_queues_on_plain_redis(
    cluster_ports: list[int], redis_url: str, tmp_path: Path
) -> None:
    """BATON_REDIS_URL=redis+cluster://… with BATON_QUEUE_URL on a plain Redis: facts,
    handoffs with stale pins, notices, reads as of a moment, push jobs, memories and verify
    all work."""
    for port in cluster_ports:
        redis.Redis(port=port).flushall()
    cluster = f"redis+cluster://127.0.0.1:{cluster_ports[0]}"
    with running_server(
        cluster, tmp_path / "api.log", BATON_QUEUE_URL=redis_url, BATON_NOTICES="on"
    ) as url:
        with httpx.Client(base_url=url, headers={"X-Baton-Agent": "scout"}) as http:
            written = [http.post("/v1/records", json={"ref": "c/x", "value": "v1"}).json()]
            http.post(
                "/v1/handoffs", json={"to": "watcher", "summary": "w", "pins": [{"ref": "c/x"}]}
            )
            written.append(http.post("/v1/records", json={"ref": "c/x", "value": "v2"}).json())
            assert [each["version"] for each in written] == [1, 2]
            then = http.get("/v1/records/c/x", params={"as_of": written[0]["created_at"]})
            assert then.json()["value"] == "v1"
            watcher = {"X-Baton-Agent": "watcher"}
            deadline = time.monotonic() + 20
            while (
                not (
                    notices := http.get("/v1/agents/watcher/notices", headers=watcher).json()[
                        "notices"
                    ]
                )
                and time.monotonic() < deadline
            ):
                time.sleep(0.1)
            assert [(n["ref"], n["pinned_version"], n["version"]) for n in notices] == [
                ("c/x", 1, 2)
            ]
            packet = http.post(
                "/v1/handoffs",
                json={"to": "executor", "summary": "s", "pins": [{"ref": "c/x", "version": 1}]},
            ).json()
            resumed = http.post(
                "/v1/agents/executor/resume", headers={"X-Baton-Agent": "executor"}
            ).json()
            assert resumed["packet"]["id"] == packet["id"]
            [stale] = resumed["stale"]
            assert (stale["ref"], stale["pinned_version"], stale["current_version"]) == (
                "c/x",
                1,
                2,
            )
            assert stale["patch"] == [{"op": "replace", "path": "", "value": "v2"}]
            saved = http.post("/v1/memories", json={"content": "cluster memories are found"})
            assert saved.status_code == 201
            found = http.post("/v1/memories/recall", json={"query": "cluster memories"}).json()
            assert found["count"] == 1
            assert http.get("/v1/stats", params={"verify": "true"}).json()["broken"] == []
            assert http.get("/readyz").status_code == 200


def test_a_cluster_without_a_queue_url_is_refused(cluster_ports: list[int]) -> None:
    """RQ cannot run on a cluster: without BATON_QUEUE_URL the server says so and stops."""
    env = {**os.environ, "BATON_REDIS_URL": f"redis+cluster://127.0.0.1:{cluster_ports[0]}"}
    env.pop("BATON_QUEUE_URL", None)
    result = subprocess.run(
        [sys.executable, "-m", "baton.server.cli", "serve", "--port", "1"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "set BATON_QUEUE_URL to a plain Redis" in result.stderr
