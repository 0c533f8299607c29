"""``make bench``'s growth table: how the cost of each operation moves with the data.

Records are seeded through ``baton import`` (the same keys, hash chains and search documents
as ``remember`` writes, a few thousand a second) and packets through the same import into one
inbox per depth; every figure is then measured through the running API at one connection:
the record rows with wrk, the packet rows with a Python client (the depth is topped up
between two calls, which wrk cannot do).
"""

from __future__ import annotations

import copy
import json
import random
import time
from typing import Any
from urllib.parse import urlencode

import httpx
import psutil

from baton.server.maintenance.backup import export, import_dump
from baton.server.model.integrity import GENESIS_HASH, digest, version_body
from baton.server.stores.records import RecordStore
from tests.bench_http import Scenario, WrkRun, wrk
from tests.benchkit import Measure, sequential
from tests.conftest import handoff_input

SEED_BATCH = 2_000
CALLS = 300
PROBE_SECONDS = 3
VARIANTS = 500  # distinct requests wrk cycles through in one probe
VOCABULARY = [f"w{n}" for n in range(5000)]
WEIGHTS = [1 / (rank + 1) for rank in range(len(VOCABULARY))]  # Zipf-like: common words common


class Seeder:
    """Clones one real exported record and one real exported packet into many."""

    def __init__(self, store: RecordStore, record: dict[str, Any], packet: dict[str, Any]) -> None:
        self.store = store
        self.record = record
        self.packet = packet
        self.rng = random.Random(5)
        self.records = 0
        self.packets = 0

    @classmethod
    async def create(cls, store: RecordStore) -> Seeder:
        await store.remember("growth-template/r", {"note": "template"}, agent="bench")
        for ref in ("growth/pin0", "growth/pin1", "growth/pin2", "growth/pin3"):
            await store.remember(ref, {"note": "pinned"}, agent="bench")
        await store.ns.handoffs.handoff(
            handoff_input(
                to="growth-template",
                summary="template",
                pins=[{"ref": f"growth/pin{n}"} for n in range(4)],
            ),
            from_agent="bench",
        )
        await store.remember("growth/pin0", {"note": "moved on"}, agent="bench")  # one stale pin
        lines = [line async for line in export(store.ns)]
        record = next(line for line in lines if line.get("ref") == "growth-template/r")
        packet = next(
            line
            for line in lines
            if line["type"] == "packet" and line["fields"]["to"] == "growth-template"
        )
        return cls(store, record, packet)

    def text(self) -> str:
        return " ".join(self.rng.choices(VOCABULARY, WEIGHTS, k=12))

    def record_line(self, ref: str) -> dict[str, Any]:
        line = copy.deepcopy(self.record)
        version = line["versions"][0]
        version["value"] = {"note": self.text()}
        body = version_body(
            ref=ref,
            version=1,
            value=version["value"],
            author=version["author"],
            session=None,
            created_at=version["created_at"],
            tags=version["tags"],
            prev_hash=GENESIS_HASH,
        )
        version["hash"] = line["head"]["hash"] = digest(body)
        line["ref"] = ref
        return line

    def packet_line(self, agent: str) -> dict[str, Any]:
        self.packets += 1
        line = copy.deepcopy(self.packet)
        fields = line["fields"]
        fields["id"] = f"h_g{self.packets:07x}"
        fields["to"] = agent
        fields["created_us"] = str(time.time_ns() // 1000)
        return line

    async def grow_records(self, total: int) -> None:
        while self.records < total:
            count = min(SEED_BATCH, total - self.records)
            lines = [self.record_line(f"growth/r{self.records + n:07d}") for n in range(count)]
            await import_dump(self.store.ns, lines)
            self.records += count

    async def queue_packets(self, agent: str, count: int) -> None:
        for start in range(0, count, SEED_BATCH):
            lines = [self.packet_line(agent) for _ in range(min(SEED_BATCH, count - start))]
            await import_dump(self.store.ns, lines)


async def growth(
    api_url: str, store: RecordStore, api_pid: int, quick: bool, lexical: tuple[str, int]
) -> list[str]:
    """The growth table (markdown lines), printed as it is measured. ``lexical``: the URL
    and pid of the same API with vectors off, whose searches stand beside the first's."""
    vectors = store.ns.search.vectors is not None
    sizes = [1_000, 10_000, 100_000] + ([] if quick else [1_000_000])
    depths = [10, 1_000, 10_000 if quick else 100_000]
    seeder = await Seeder.create(store)
    headers = {"X-Baton-Agent": "bench"}
    rng = random.Random(9)
    lines = [
        "### How cost grows",
        "",
        "Every figure through the API at one connection (wrk, 3 s per figure): `remember` a "
        "new version of a "
        "random record, `recall` a random record, search (`GET /v1/records?query=` two "
        "words drawn from the same Zipf-like vocabulary, 10 results), `verify` of every "
        "version, and a signed checkpoint of the whole namespace (`POST /v1/checkpoints`, "
        "the API's RSS before and after it: computing one streams the refs). Records carry 12 "
        "words each; the namespace also holds the memories of the `memory_recall` scenario, "
        "in the same search index. Search is measured twice: by an API with BM25 alone "
        "(`BATON_VECTORS=off`) and by one fusing vectors"
        + (
            " (the vectors extra installed; the vocabulary's made-up words embed alike, so "
            "every document is above the similarity floor: the vector path's worst case)."
            if vectors
            else " (not measured: the vectors extra is not installed)."
        ),
        "",
        "| records | remember p50 | recall p50 | search p50 / p95, BM25 | search p50 / p95, "
        "with vectors | verify | checkpoint | API RSS |",
        "|---|---|---|---|---|---|---|---|",
    ]
    async with httpx.AsyncClient(base_url=api_url, headers=headers, timeout=60) as http:

        def probe(scenario: Scenario, url: str = api_url, pid: int = api_pid) -> WrkRun:
            return wrk(url, scenario, connections=1, seconds=PROBE_SECONDS, server_pids=[pid])

        def refs() -> list[str]:
            return [f"growth/r{rng.randrange(seeder.records):07d}" for _ in range(VARIANTS)]

        for size in sizes:
            started = time.perf_counter()
            await seeder.grow_records(size)
            print(
                f"growth: {size:,} records ({time.perf_counter() - started:.0f} s to seed)",
                flush=True,
            )
            bodies = [json.dumps({"ref": ref, "value": {"note": seeder.text()}}) for ref in refs()]
            writes = probe(Scenario("remember", ["/v1/records"], "POST", bodies))
            reads = probe(Scenario("recall", [f"/v1/records/{ref}" for ref in refs()]))
            queries = [
                "/v1/records?"
                + urlencode({"query": " ".join(rng.choices(VOCABULARY, WEIGHTS, k=2)), "limit": 10})
                for _ in range(VARIANTS)
            ]
            bm25 = probe(Scenario("search", queries), *lexical)
            fused = "-"
            if vectors:
                # the first search after seeding fills the API's copy of the vectors (the
                # seed outran the changes stream): not part of a search's cost
                (await http.get(queries[0], timeout=600)).raise_for_status()
                searches = probe(Scenario("search", queries))
                fused = f"{searches.p50_ms:.2f} / {searches.p95_ms:.2f} ms"
            started = time.perf_counter()
            stats = await store.ns.verifier.stats(verify=True, scope="growth")
            seconds = time.perf_counter() - started
            api = psutil.Process(api_pid)
            before_rss = api.memory_info().rss / 2**20
            started = time.perf_counter()
            taken = await http.post("/v1/checkpoints", timeout=3600)
            checkpoint_seconds = time.perf_counter() - started
            assert taken.status_code == 201, taken.text
            rss = api.memory_info().rss / 2**20
            row = (
                f"| {size:,} | {writes.p50_ms:.2f} ms | {reads.p50_ms:.2f} ms | "
                f"{bm25.p50_ms:.2f} / {bm25.p95_ms:.2f} ms | {fused} | "
                f"{stats.checked_versions:,} versions in {seconds:.1f} s "
                f"({(stats.checked_versions or 0) / seconds:,.0f}/s) | "
                f"{taken.json()['records']:,} records in {checkpoint_seconds:.1f} s | "
                f"{before_rss:.0f} → {rss:.0f} MiB |"
            )
            print(row, flush=True)
            lines.append(row)

        lines += [
            "",
            "| packets queued for the agent | resume p50 / p95 (4 pins, one stale; Python "
            "client) |",
            "|---|---|",
        ]
        for depth in depths:
            agent = f"deep-{depth}"
            await seeder.queue_packets(agent, depth)

            took = Measure("resume")

            async def resume(i: int, agent: str = agent, took: Measure = took) -> None:
                await seeder.queue_packets(agent, 1)  # keep the depth (its time is not counted)
                before = time.perf_counter()
                response = await http.post(
                    f"/v1/agents/{agent}/resume", headers={"X-Baton-Agent": agent}
                )
                took.latencies.append(time.perf_counter() - before)
                assert response.status_code == 200 and response.json()["stale"], response.text

            await sequential(resume, CALLS, "resume")
            took.latencies = took.latencies[-CALLS:]
            row = f"| {depth:,} | {took.pct(0.5):.2f} / {took.pct(0.95):.2f} ms |"
            print(row, flush=True)
            lines.append(row)
    return lines
