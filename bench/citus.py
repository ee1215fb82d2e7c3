"""`python -m bench citus`: one node against a Citus cluster (a coordinator and two workers on this
machine, `tools/citus.py` `Cluster`), the same data in both: recall and `add_facts` latency of a
small and a large tenant, the stores called alternately, ratios side by side.

The cluster runs at PostgreSQL's and Citus' defaults (`DEFAULT_NODE_SETTINGS`), and the store is
distributed as a user does it: made by `Memory.open`, distributed by `memsoda --dsn ... distribute`
with no options (`citus.shard_count` shards, no tenant isolated), then opened again. With
`tuned`, a second store on the same cluster is distributed with 8 shards and the large tenant
isolated on a shard of its own, its rows beside the defaults'. With `through_coordinator`, another
store distributed as the defaults' is read with `worker_reads=False`: every statement through the
coordinator, as a client that cannot reach the workers reads. Each tenant is its own dataset
(the distribution key), loaded with COPY (`synth.load`) after distributing, so the rows go
straight to the shards; every store is then vacuumed and left by autovacuum, on the workers too
(`bench.common.settle`), before anything is timed. Recall gets precomputed query vectors
(`query_embedding`), `add_facts` 2 facts with their vectors given: what is timed is memsoda and the
database, not a model.
"""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from bench import synth
from bench.citus_direct import FORMS, DirectReads, direct_reads
from bench.common import bench_memory, connect, environment, markdown_table, percentiles, settle
from memsoda_core import Memory, ScopeArgs
from memsoda_core.distributed import distribute
from memsoda_core.embedders import Embedder
from memsoda_core.validation import Scope

ROOT = Path(__file__).resolve().parent.parent
TUNED_SHARDS = 8
DEFAULT_NODE_SETTINGS = {"fsync": "on", "max_connections": "100", "wal_level": "replica"}
"""Over `tools/citus.py` `NODE_SETTINGS` (a test cluster's): PostgreSQL's defaults back, so each
node runs as installed but for what Citus needs (preloaded, two-phase commit) and its address."""


@dataclass(frozen=True)
class Layout:
    """How one Citus store of the run is distributed."""

    label: str
    shard_count: int | None = None
    """None: as `memsoda distribute` with no options, `citus.shard_count`."""
    isolate_large: bool = False
    worker_reads: bool = True
    """`Memory.open(worker_reads=...)`."""


DEFAULTS = Layout("Citus defaults")
TUNED = Layout(f"{TUNED_SHARDS} shards, large tenant isolated", shard_count=TUNED_SHARDS, isolate_large=True)
THROUGH_COORDINATOR = Layout("Citus defaults, worker_reads=False", worker_reads=False)


def _tool() -> ModuleType:
    """tools/citus.py (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("memsoda_citus_tool", ROOT / "tools" / "citus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _distribute_as_a_user(dsn: str, schema: str) -> None:
    """`memsoda --dsn DSN --schema SCHEMA distribute`, in a process of its own."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "memsoda_core.cli", "--dsn", dsn, "--schema", schema, "distribute"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"memsoda distribute failed: {done.stderr or done.stdout}")


@contextmanager
def citus_memory(embedder: Embedder, coordinator: str, layout: Layout, large: str) -> Iterator[Memory]:
    """A Memory on a store distributed as `layout` says, in a fresh schema of `coordinator`
    (dropped afterwards)."""
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    Memory.open(coordinator, embedder, schema=schema).close()
    if layout.shard_count is None and not layout.isolate_large:
        _distribute_as_a_user(coordinator, schema)
    else:
        isolate = [large] if layout.isolate_large else []
        distribute(coordinator, schema, shard_count=layout.shard_count, isolate=isolate, transfer_mode="block_writes")
    memory = Memory.open(coordinator, embedder, schema=schema, worker_reads=layout.worker_reads)
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
    with _tool().Cluster(root, settings=DEFAULT_NODE_SETTINGS) as cluster:
        yield cluster.dsn


def _workers(dsn: str) -> list[str]:
    """The DSNs of a Citus coordinator's workers (its own user and options at their addresses); none
    for a server without Citus."""
    with psycopg.connect(dsn) as conn:
        if conn.execute("SELECT to_regclass('pg_catalog.pg_dist_node')").fetchall()[0][0] is None:
            return []
        nodes = conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0 ORDER BY nodeid"
        ).fetchall()
    return [make_conninfo(dsn, host=host, port=port) for host, port in nodes]


def _shards(memory: Memory) -> int:
    with psycopg.connect(memory.dsn) as conn:
        rows = conn.execute(
            "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = to_regclass(%s)", (f"{memory.info.schema}.facts",)
        ).fetchall()
    return int(rows[0][0])


def _facts(rng: random.Random, n: int) -> list[dict[str, Any]]:
    return [
        {"subject": f"person {rng.randrange(10**6)}", "predicate": "likes", "object": f"thing {rng.randrange(10**6)}"}
        for _ in range(n)
    ]


def _cell(samples: list[float]) -> tuple[str, float]:
    p = percentiles(samples)
    return f"{p['p50']:.2f} / {p['p95']:.2f}", p["p50"]


def run(
    *,
    embedder: Embedder,
    small: int = 1_000,
    large: int = 100_000,
    recalls: int = 120,
    writes: int = 60,
    warmup: int = 15,
    citus_dsn: str | None = None,
    tuned: bool = False,
    through_coordinator: bool = False,
    shard_direct: bool = False,
    seed: int = 7,
) -> str:
    """The whole comparison; returns markdown. With `shard_direct`, the small tenant's statement is
    also timed alone three ways (`bench.citus_direct`)."""
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
    layouts = [DEFAULTS, *([TUNED] if tuned else []), *([THROUGH_COORDINATOR] if through_coordinator else [])]
    out: list[str] = []
    with ExitStack() as stack:
        one = stack.enter_context(bench_memory(embedder))
        coordinator = stack.enter_context(_cluster(citus_dsn))
        stores = {"one node": one}
        for layout in layouts:
            stores[layout.label] = stack.enter_context(citus_memory(embedder, coordinator, layout, tenants[1].dataset))
        loads = {}
        for label, memory in stores.items():
            started = time.perf_counter()
            with connect(memory.dsn) as conn:
                synth.load(conn, memory.info.schema, tenants)
            memory.maintain()
            loads[label] = time.perf_counter() - started
        for memory in stores.values():  # measured in steady state: no autovacuum of the load beside it
            settle(memory.dsn, memory.info.schema, also_wait_on=_workers(memory.dsn))
        out.append(f"Run: {environment(one.dsn)}; store embedder {embedder.model} ({dims}-d).\n")
        cluster = "started here at PostgreSQL's and Citus' defaults" if citus_dsn is None else "given"
        out.append(
            f"Citus: coordinator + 2 workers on this machine ({cluster}); stores: "
            + "; ".join(
                f"{layout.label} ({_shards(stores[layout.label])} shards, distributed: "
                f"{stores[layout.label].info.layout == 'citus'})"
                for layout in layouts
            )
            + f". Loading {sum(len(t.facts) for t in tenants):,} facts (COPY, index build, tenant indexes): "
            + ", ".join(f"{label} {seconds:.1f} s" for label, seconds in loads.items())
            + ".\n"
        )
        rows = []
        rng = random.Random(seed)
        for tenant, size in zip(tenants, sizes.values(), strict=True):
            scope: ScopeArgs = {"dataset": tenant.dataset, "project": tenant.project}
            recall_ms: dict[str, list[float]] = {label: [] for label in stores}
            write_ms: dict[str, list[float]] = {label: [] for label in stores}
            after_ms: dict[str, list[float]] = {label: [] for label in stores}
            for i, query in enumerate(workload[tenant.dataset]):
                for label, memory in stores.items():  # alternating, call by call
                    started = time.perf_counter()
                    memory.recall(query.text, **scope, query_embedding=query.values)
                    if i >= warmup:
                        recall_ms[label].append((time.perf_counter() - started) * 1000)
            for i in range(warmup + writes):
                facts = _facts(rng, 2)
                vectors = np.asarray(synth._unit(np.random.default_rng(i).standard_normal((2, dims))))
                query = workload[tenant.dataset][i % len(workload[tenant.dataset])]
                for label, memory in stores.items():
                    started = time.perf_counter()
                    memory.add_facts(facts, **scope, vectors=vectors)
                    wrote = time.perf_counter()
                    memory.recall(query.text, **scope, query_embedding=query.values)  # an agent's next turn
                    if i >= warmup:
                        write_ms[label].append((wrote - started) * 1000)
                        after_ms[label].append((time.perf_counter() - wrote) * 1000)
            indexed = " (own indexes)" if size >= one.info.tenant_index_min_facts else ""
            r1, r1_p50 = _cell(recall_ms["one node"])
            w1, w1_p50 = _cell(write_ms["one node"])
            a1, a1_p50 = _cell(after_ms["one node"])
            for layout in layouts:
                r2, r2_p50 = _cell(recall_ms[layout.label])
                w2, w2_p50 = _cell(write_ms[layout.label])
                a2, a2_p50 = _cell(after_ms[layout.label])
                row = [f"{size:,} facts{indexed}", layout.label, r1, r2, f"{r2_p50 / r1_p50:.2f}x", w1, w2]
                rows.append([*row, f"{w2_p50 / w1_p50:.2f}x", a1, a2, f"{a2_p50 / a1_p50:.2f}x"])
        header = [
            "tenant",
            "Citus store",
            "recall p50 / p95 ms, one node",
            "Citus",
            "ratio p50",
            "add_facts(2) p50 / p95 ms, one node",
            "Citus",
            "ratio p50",
            "recall right after it, one node",
            "Citus",
            "ratio p50",
        ]
        out.append(
            f"{recalls} recalls and {writes} `add_facts` of 2 facts per tenant after {warmup} warm-up calls each, "
            "the stores alternating call by call; each `add_facts` followed by a recall (an agent's next turn: "
            "the write just told the memory the scope's new size and latest facts).\n"
        )
        out.append(markdown_table(header, rows))
        if shard_direct:  # after the table above, so that its calls alternate as they do without
            small_scope = Scope(dataset=tenants[0].dataset, project=tenants[0].project)
            with direct_reads(one, stores[DEFAULTS.label], small_scope) as direct:
                for i, query in enumerate(workload[small_scope.dataset]):
                    stores[DEFAULTS.label].recall(query.text, **vars(small_scope), query_embedding=query.values)
                    direct.run(timed=i >= warmup)
            out.append(_direct_table(direct, small))
    return "\n".join(out) + "\n"


def _direct_table(direct: DirectReads, facts: int) -> str:
    base = percentiles(direct.samples[FORMS[0]])["p50"]
    rows = []
    for form in FORMS:
        p = percentiles(direct.samples[form])
        rows.append([form, f"{p['p50']:.2f} / {p['p95']:.2f}", f"{p['p50'] / base:.2f}x"])
    return (
        f"\nThe {facts:,}-fact tenant's recall statement alone, after each of its Citus recalls again"
        " (`--shard-direct`: memsoda's two forms, through the coordinator and on the worker's shards):\n\n"
        + markdown_table(["statement run", "p50 / p95 ms", "against one node"], rows)
    )
