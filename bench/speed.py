"""`python -m bench speed`: recall latency for large tenants among many small ones, side by side
with the pgvector floor, LangChain's EnsembleRetriever and LlamaIndex's QueryFusionRetriever.

One store holds `small` tenants of `small_facts` facts and one large tenant per size, all loaded
with COPY (see `synth.py`; random clustered vectors). Each query is run once per system, the
systems in a rotating order so that the machine's noise falls on all of them alike.
"""

from __future__ import annotations

import random
import statistics
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from bench import rivals, synth
from bench.common import bench_memory, connect, environment, markdown_table, percentiles, settle
from memsoda_core import Memory
from memsoda_core.embedders import Embedder

FLOOR = """SELECT f.id FROM {s}.facts f
WHERE f.dataset = %(dataset)s AND f.project = %(project)s AND f.valid_at <= now()
  AND (f.invalid_at IS NULL OR f.invalid_at > now()) AND f.confidence >= 0.5
ORDER BY f.embedding <=> %(qvec)s LIMIT 8"""


@dataclass
class Samples:
    ms: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)


@dataclass
class SizeResult:
    size: int
    systems: dict[str, Samples]
    stages: dict[str, list[float]]
    peak_kib: float
    parts: dict[str, Samples] = field(default_factory=dict)
    kind: str = "large"
    blocks: dict[str, Samples] = field(default_factory=dict)


BLOCK = 10
"""Queries per block in the back-to-back measurement."""


PARTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "memsoda's recall statements as recall runs them, one after the other (no Python, no fact read after fusion)",
        "core",
        (),
    ),
    ("vector signal alone (kNN 50, iterative scan)", "default", ("vector",)),
    ("anchor signal alone (2 hops, bridges up to 50 facts: the default)", "default", ("anchor",)),
    ("anchor signal alone (2 hops, bridges uncapped)", "bridge_off", ("anchor",)),
    ("anchor signal alone (1 hop)", "hop1", ("anchor",)),
    ("keyword signal alone (min(ceil(n/2), 2) terms by IDF: the default)", "default", ("keyword",)),
    ("keyword signal alone (half the terms by ts_rank: the default before issue 20)", "half", ("keyword",)),
    ("keyword signal alone (plain OR of terms)", "or", ("keyword",)),
    ("keyword signal alone (AND, plainto_tsquery)", "and", ("keyword",)),
    ("anchor signal alone (2 hops, hubs from 1% of the scope)", "hub1pct", ("anchor",)),
)


def breakdown(memory: Memory, project: str, queries: Sequence[synth.SynthQuery]) -> dict[str, Samples]:
    """Where a recall's database time goes: memsoda's statements as `Memory.recall` runs them
    (kept or generic plans, see `scope_sizes`), then each signal's fragment alone, planned afresh
    every run, same parameters."""
    from datetime import UTC, datetime

    from bench import variants
    from memsoda_core.layouts import layout_of
    from memsoda_core.options import DEFAULT_OPTIONS
    from memsoda_core.recall.operation import KEPT_MARGIN
    from memsoda_core.recall.plans import FULL_PLAN
    from memsoda_core.recall.signals import planned_signals
    from memsoda_core.recall.statements import kept_hits_statement, one_statement, recall_statements
    from memsoda_core.runner.steps import Execute, Planning
    from memsoda_core.runner.sync_runner import _fetch
    from memsoda_core.validation import Scope

    configs = {
        "default": variants.Variant(options=DEFAULT_OPTIONS),
        "hop1": variants.Variant(options=DEFAULT_OPTIONS.with_overrides({"anchor.hops": 1})),
        "or": variants.Variant(options=DEFAULT_OPTIONS, keyword=variants.KeywordForm.OR),
        "half": variants.Variant(options=DEFAULT_OPTIONS, keyword=variants.KeywordForm.HALF_TS_RANK),
        "and": variants.Variant(options=DEFAULT_OPTIONS, keyword=variants.KeywordForm.AND),
        "hub1pct": variants.Variant(options=DEFAULT_OPTIONS.with_overrides({"entities.hub_min_share": 0.01})),
        "bridge_off": variants.Variant(
            options=DEFAULT_OPTIONS.with_overrides({"anchor.bridge_max_facts": variants.UNCAPPED})
        ),
    }
    schema = memory.info.schema
    scope = Scope(dataset=synth.DATASET, project=project)
    layout = layout_of(memory.info)
    size = memory._runner.run(layout.scope_size(memory.info, scope, Planning.CACHED), read_only=True)
    access = layout.access(memory.info, scope, size)  # as recall derives it (a placed dataset: its own partitions)
    core_planning = access.planning
    core = (
        (kept_hits_statement(schema, FULL_PLAN, access),)
        if one_statement(size.facts, memory.info.tenant_index_min_facts, planned_signals(FULL_PLAN))
        else recall_statements(schema, FULL_PLAN, access)
    )
    statements = {
        label: core if config == "core" else (variants.statement(schema, configs[config], signals),)
        for label, config, signals in PARTS
    }
    planning = {label: core_planning if config == "core" else Planning.FRESH for label, config, _ in PARTS}
    out = {label: Samples() for label in statements}
    with connect(memory.dsn) as conn:
        for i, q in enumerate(queries):
            for label in list(statements)[i % len(statements) :] + list(statements)[: i % len(statements)]:
                config = configs.get(dict((p[0], p[1]) for p in PARTS)[label], configs["default"])
                bound = variants.params(
                    scope=scope,
                    query=q.text,
                    embedding=q.values,
                    at=datetime.now(UTC),
                    options=config.options,
                    tsconfig=memory.info.text_search_config,
                )
                bound["kept_candidates"] = config.options.facts_in_context + KEPT_MARGIN
                start = time.perf_counter()
                rows = [row for st in statements[label] for row in _fetch(conn, Execute(st, bound, planning[label]))]
                out[label].ms.append((time.perf_counter() - start) * 1000)
                out[label].rows.append(len(rows))
    return out


def _systems(
    memory: Memory,
    serial: Memory,
    conn: Any,
    project: str,
    lc: dict[str, Any],
    li: dict[str, Any],
) -> dict[str, Callable[[synth.SynthQuery], int]]:
    floor = sql.SQL(FLOOR).format(s=sql.Identifier(memory.info.schema))
    calls: dict[str, Callable[[synth.SynthQuery], int]] = {
        "memsoda recall": lambda q: len(
            memory.recall(q.text, dataset=synth.DATASET, project=project, query_embedding=q.values).facts
        ),
        "memsoda recall, statements one after the other (pool_size=1)": lambda q: len(
            serial.recall(q.text, dataset=synth.DATASET, project=project, query_embedding=q.values).facts
        ),
        DATE_ROW: lambda q: len(
            memory.recall(
                f"{q.text} {DATE_WORDS}", dataset=synth.DATASET, project=project, query_embedding=q.values
            ).facts
        ),
        "floor: bare kNN top-8": lambda q: len(
            conn.execute(floor, {"dataset": synth.DATASET, "project": project, "qvec": q.vector}).fetchall()
        ),
    }
    if project in lc:
        calls["LangChain EnsembleRetriever"] = lambda q: len(lc[project].invoke(q.text))
    if project in li:
        from llama_index.core.schema import QueryBundle

        calls["LlamaIndex QueryFusionRetriever"] = lambda q: len(
            li[project].retrieve(QueryBundle(q.text, embedding=list(q.values)))
        )
    return calls


DATE_WORDS = "last month"
DATE_ROW = f"memsoda recall, the question names a date ({DATE_WORDS!r}: the date statement too)"
"""The same queries with a window appended: the date signal's statement runs beside the others."""

EMBED_LOOP = "memsoda recall, embedder in the loop"
"""Measured last (after the stage timings too), not between the others: after each embedding
torch's OpenMP threads keep spinning for a while, and a recall run right after one took 9.2 ms
instead of 5.5 (10k-fact tenant among 1M facts, a one-off script); interleaved, it slowed whichever
row came next."""


def measure(
    memory: Memory,
    project: str,
    queries: Sequence[synth.SynthQuery],
    *,
    warmup: int,
    lc: dict[str, Any],
    li: dict[str, Any],
    embed_loop: bool,
) -> SizeResult:
    serial = Memory.open(memory.dsn, memory.embedder, schema=memory.info.schema, pool_size=1)
    with serial, connect(memory.dsn) as conn:
        calls = _systems(memory, serial, conn, project, lc, li)
        names = list(calls)
        for q in queries[:warmup]:
            for name in names:
                calls[name](q)
        results = {name: Samples() for name in names}
        for i, q in enumerate(queries[warmup:]):
            order = names[i % len(names) :] + names[: i % len(names)]
            for name in order:
                start = time.perf_counter()
                count = calls[name](q)
                results[name].ms.append((time.perf_counter() - start) * 1000)
                results[name].rows.append(count)
        # The same queries again, each system running BLOCK of them in a row, the systems taking
        # turns block by block: a system's process and connections stay warm within a block,
        # while drift in the machine's load still reaches every system alike.
        blocks = {name: Samples() for name in names}
        for b, first in enumerate(range(warmup, len(queries), BLOCK)):
            for name in names[b % len(names) :] + names[: b % len(names)]:
                for q in queries[first : first + BLOCK]:
                    start = time.perf_counter()
                    count = calls[name](q)
                    blocks[name].ms.append((time.perf_counter() - start) * 1000)
                    blocks[name].rows.append(count)
    stages: dict[str, list[float]] = {}
    peaks = []
    for q in queries[warmup : warmup + 40]:
        result = memory.recall(q.text, dataset=synth.DATASET, project=project, query_embedding=q.values)
        for stage, value in result.timings_ms.items():
            stages.setdefault(stage, []).append(value)
    for q in queries[warmup : warmup + 20]:  # apart: tracemalloc slows Python down several times
        tracemalloc.start()
        memory.recall(q.text, dataset=synth.DATASET, project=project, query_embedding=q.values)
        peaks.append(tracemalloc.get_traced_memory()[1] / 1024)
        tracemalloc.stop()
    if embed_loop:  # last: see EMBED_LOOP
        results[EMBED_LOOP] = Samples()
        for i, q in enumerate(queries):
            start = time.perf_counter()
            count = len(memory.recall(q.text + " ", dataset=synth.DATASET, project=project).facts)
            if i >= warmup:
                results[EMBED_LOOP].ms.append((time.perf_counter() - start) * 1000)
                results[EMBED_LOOP].rows.append(count)
    return SizeResult(
        size=0, systems=results, stages=stages, peak_kib=statistics.median(peaks) if peaks else 0.0, blocks=blocks
    )


def run(
    *,
    embedder: Embedder,
    sizes: Sequence[int] = (10_000, 100_000),
    small: int = 100,
    small_facts: int = 1000,
    queries: int = 200,
    warmup: int = 20,
    rivals_on: bool = True,
    embed_loop: bool = True,
    seed: int = 7,
) -> str:
    """The whole speed benchmark; returns markdown."""
    dims = int(embedder.dimensions)
    words = synth.vocabulary(3000, random.Random(seed))
    out: list[str] = []
    with bench_memory(embedder) as memory:
        started = time.perf_counter()
        tenants = [
            synth.generate(
                synth.Tenant(project=f"small{i:03d}", facts=small_facts), dims=dims, words=words, seed=seed * 1000 + i
            )
            for i in range(small)
        ]
        large = [f"large{size}" for size in sizes]
        # the first small tenant is measured too: most memories are small, and they have no tenant index
        measured = ([tenants[0].project] if small else []) + large
        measured_sizes = ([small_facts] if small else []) + list(sizes)
        tenants += [
            synth.generate(synth.Tenant(project=name, facts=size), dims=dims, words=words, seed=seed + size)
            for name, size in zip(large, sizes, strict=True)
        ]
        generated = time.perf_counter() - started
        total = sum(len(t.facts) for t in tenants)
        workload = {
            name: synth.queries(t, warmup + queries, words=words, seed=seed)
            for t in tenants
            for name in [t.project]
            if name in measured
        }
        with connect(memory.dsn) as conn:
            report = synth.load(conn, memory.info.schema, tenants)
            mark = time.perf_counter()
            tenant_indexes = memory.maintain().indexes  # what a write through memsoda would have built
            tenant_index_s = time.perf_counter() - mark
            lc: dict[str, Any] = {}
            li: dict[str, Any] = {}
            setup: dict[str, float] = {}
            if rivals_on:
                lookup = rivals.Lookup({q.text: q.vector.tolist() for qs in workload.values() for q in qs}, dims)
                for name, loader, loaded in (
                    ("LangChain", rivals.langchain_setup, lc),
                    ("LlamaIndex", rivals.llamaindex_setup, li),
                ):
                    mark = time.perf_counter()
                    try:
                        loaded.update(loader(conn, memory.dsn, tenants, measured, lookup, prefix=memory.info.schema))
                        setup[name] = time.perf_counter() - mark
                    except ImportError as exc:
                        out.append(f"{name} skipped (not installed): {exc}\n")
        settled_s = settle(memory.dsn, memory.info.schema)  # the rivals' tables loaded too: measured in steady state
        out.insert(0, f"Run: {environment(memory.dsn)}; store embedder {embedder.model} ({dims}-d).\n")
        out.append(
            f"Tables: {total:,} facts in {len(tenants)} tenants ({small} x {small_facts:,} + "
            f"{', '.join(f'{s:,}' for s in sizes)}); random clustered unit vectors ({dims}-d), ~20% invalidated. "
            f"Generated in {generated:.1f} s; COPY {report.copy_s:.1f} s ({report.copy_rate:,.0f} facts/s, "
            f"indexes dropped), index build + VACUUM ANALYZE {report.index_s:.1f} s, "
            f"{len(tenant_indexes)} tenant indexes (tenants of {memory.info.tenant_index_min_facts:,}+ facts) "
            f"{tenant_index_s:.1f} s; then VACUUM ANALYZE and autovacuum settled ({settled_s:.1f} s, `common.settle`)"
            + "".join(f"; {name} load + index {s:.1f} s" for name, s in setup.items())
            + ".\n"
        )
        try:
            for size, project in zip(measured_sizes, measured, strict=True):
                result = measure(memory, project, workload[project], warmup=warmup, lc=lc, li=li, embed_loop=embed_loop)
                result.size = size
                result.kind = "large" if project in large else "small"
                result.parts = breakdown(memory, project, workload[project][warmup:])
                out.append(table(result, len(workload[project]) - warmup))
        finally:
            rivals.close(lc)
            rivals.close(li)
            with connect(memory.dsn) as conn:
                rivals.drop(conn, memory.info.schema)
    return "\n".join(out) + "\n"


def _system_rows(systems: dict[str, Samples]) -> list[list[Any]]:
    base = percentiles(systems["memsoda recall"].ms)
    floor = percentiles(systems["floor: bare kNN top-8"].ms)
    rows = []
    for name, samples in systems.items():
        p = percentiles(samples.ms)
        rows.append(
            [
                name,
                p["p50"],
                p["p95"],
                p["p99"],
                f"{p['p50'] / floor['p50']:.2f}x",
                f"{p['p50'] / base['p50']:.2f}x",
                f"{statistics.fmean(samples.rows):.1f}",
            ]
        )
    return rows


def table(result: SizeResult, n: int) -> str:
    header = ["system", "p50 ms", "p95 ms", "p99 ms", "p50 / floor", "p50 / memsoda", "rows returned"]
    rows = _system_rows(result.systems)
    stages = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in result.stages.items())
    parts = [
        [label, *(percentiles(s.ms)[k] for k in ("p50", "p95", "p99")), f"{statistics.fmean(s.rows):.1f}"]
        for label, s in result.parts.items()
    ]
    breakdown_table = (
        "\n\nWhere the database time goes (each fragment alone, same queries):\n\n"
        + markdown_table(["statement", "p50 ms", "p95 ms", "p99 ms", "hit rows"], parts)
        if parts
        else ""
    )
    blocks_table = (
        f"\n\nBack to back: the same queries, each system running {BLOCK} in a row, the systems taking turns"
        " block by block (nothing else runs between a system's queries, except before the first of a block):\n\n"
        + markdown_table(header, _system_rows(result.blocks))
        if result.blocks
        else ""
    )
    return (
        f"### {result.kind} tenant of {result.size:,} facts ({n} queries, precomputed query vectors)\n\n"
        + markdown_table(header, rows)
        + blocks_table
        + f"\n\nmemsoda stages (median ms): {stages}; Python peak allocation per recall (median): "
        f"{result.peak_kib:,.0f} KiB." + breakdown_table + "\n"
    )
