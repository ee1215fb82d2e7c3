"""`python -m bench citus`: one node against a Citus cluster (a coordinator and two workers on this
machine, `tools/citus.py` `Cluster`), the same data in both: recall and `add_facts` latency of a
small and a large tenant, the two stores called alternately, ratios side by side.

Each tenant is its own dataset (the distribution key), loaded with COPY (`synth.load`); on the
cluster the store is distributed first (8 shards, the large tenant isolated to a shard of its
own), then loaded, so the rows go straight to the shards. Recall gets precomputed query vectors
(`query_embedding`), `add_facts` 2 facts with their vectors given: what is timed is memsoda and
the database, not a model.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from bench import synth
from bench.common import bench_memory, connect, environment, markdown_table, percentiles
from memsoda_core import Memory
from memsoda_core.distributed import distribute
from memsoda_core.embedders import Embedder

ROOT = Path(__file__).resolve().parent.parent
SHARDS = 8
NODE_SHARED_BUFFERS = "'2GB'"
"""As the embedded one node's (memsoda_core.server), on each node of the cluster started here."""


def _tool() -> ModuleType:
    """tools/citus.py (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("memsoda_citus_tool", ROOT / "tools" / "citus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def citus_memory(embedder: Embedder, dsn: str | None, isolate: str) -> Iterator[Memory]:
    """A Memory on a distributed store in a fresh schema: of the coordinator `dsn`, or of a
    cluster started here (stopped and removed afterwards)."""
    with _cluster(dsn) as coordinator:
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        Memory.open(coordinator, embedder, schema=schema).close()
        distribute(coordinator, schema, shard_count=SHARDS, isolate=[isolate], transfer_mode="block_writes")
        memory = Memory.open(coordinator, embedder, schema=schema)
        try:
            yield memory
        finally:
            memory.close()
            with psycopg.connect(coordinator, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def _cluster(dsn: str | None) -> Iterator[str]:
    if dsn:
        yield dsn
        return
    root = Path(tempfile.mkdtemp(prefix="memsoda-citus-bench-"))
    with _tool().Cluster(root, settings={"shared_buffers": NODE_SHARED_BUFFERS}) as cluster:
        yield cluster.dsn


def _facts(rng: random.Random, n: int) -> list[dict[str, Any]]:
    return [
        {"subject": f"person {rng.randrange(10**6)}", "predicate": "likes", "object": f"thing {rng.randrange(10**6)}"}
        for _ in range(n)
    ]


def run(
    *,
    embedder: Embedder,
    small: int = 1_000,
    large: int = 100_000,
    recalls: int = 120,
    writes: int = 60,
    warmup: int = 15,
    citus_dsn: str | None = None,
    seed: int = 7,
) -> str:
    """The whole comparison; returns markdown."""
    dims = int(embedder.dimensions)
    words = synth.vocabulary(3000, random.Random(seed))
    sizes = {"small": small, "large": large}
    tenants = [
        replace(
            synth.generate(synth.Tenant(project="p", facts=size), dims=dims, words=words, seed=seed + size),
            dataset=f"citus-{name}",
        )
        for name, size in sizes.items()
    ]
    workload = {t.dataset: synth.queries(t, warmup + recalls, words=words, seed=seed) for t in tenants}
    out: list[str] = []
    with bench_memory(embedder) as one, citus_memory(embedder, citus_dsn, isolate=tenants[1].dataset) as dist:
        loads = {}
        for label, memory in (("one node", one), ("Citus", dist)):
            started = time.perf_counter()
            with connect(memory.dsn) as conn:
                synth.load(conn, memory.info.schema, tenants)
            memory.maintain()
            loads[label] = time.perf_counter() - started
        out.append(f"Run: {environment(one.dsn)}; store embedder {embedder.model} ({dims}-d).\n")
        out.append(
            f"Citus: coordinator + 2 workers on this machine, {SHARDS} shards, {tenants[1].dataset} isolated; "
            f"distributed: {dist.info.distributed}. Loading {sum(len(t.facts) for t in tenants):,} facts "
            f"(COPY, index build, tenant indexes): one node {loads['one node']:.1f} s, Citus {loads['Citus']:.1f} s.\n"
        )
        rows = []
        rng = random.Random(seed)
        for tenant, (name, size) in zip(tenants, sizes.items(), strict=True):
            scope = {"dataset": tenant.dataset, "project": tenant.project}
            recall_ms: dict[str, list[float]] = {"one": [], "dist": []}
            write_ms: dict[str, list[float]] = {"one": [], "dist": []}
            for i, query in enumerate(workload[tenant.dataset]):
                for key, memory in (("one", one), ("dist", dist)):  # alternating, call by call
                    started = time.perf_counter()
                    memory.recall(query.text, **scope, query_embedding=query.values)
                    took = (time.perf_counter() - started) * 1000
                    if i >= warmup:
                        recall_ms[key].append(took)
            for i in range(warmup + writes):
                facts = _facts(rng, 2)
                vectors = np.asarray(synth._unit(np.random.default_rng(i).standard_normal((2, dims))))
                for key, memory in (("one", one), ("dist", dist)):
                    started = time.perf_counter()
                    memory.add_facts(facts, **scope, vectors=vectors)
                    took = (time.perf_counter() - started) * 1000
                    if i >= warmup:
                        write_ms[key].append(took)
            r1, r2 = percentiles(recall_ms["one"]), percentiles(recall_ms["dist"])
            w1, w2 = percentiles(write_ms["one"]), percentiles(write_ms["dist"])
            indexed = size >= one.info.tenant_index_min_facts
            label = (
                f"{size:,} facts"
                + (" (own indexes" if indexed else "")
                + (
                    ", isolated shard)"
                    if name == "large" and indexed
                    else " (isolated shard)"
                    if name == "large"
                    else ""
                )
            )
            rows.append(
                [
                    label,
                    f"{r1['p50']:.2f} / {r1['p95']:.2f}",
                    f"{r2['p50']:.2f} / {r2['p95']:.2f}",
                    f"{r2['p50'] / r1['p50']:.2f}x",
                    f"{w1['p50']:.2f} / {w1['p95']:.2f}",
                    f"{w2['p50']:.2f} / {w2['p95']:.2f}",
                    f"{w2['p50'] / w1['p50']:.2f}x",
                ]
            )
        header = [
            "tenant",
            "recall p50 / p95 ms, one node",
            "Citus",
            "ratio p50",
            "add_facts(2) p50 / p95 ms, one node",
            "Citus",
            "ratio p50",
        ]
        out.append(
            f"{recalls} recalls and {writes} `add_facts` of 2 facts per tenant after {warmup} warm-up calls each, "
            "the two stores alternating call by call.\n"
        )
        out.append(markdown_table(header, rows))
    return "\n".join(out) + "\n"
