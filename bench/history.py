"""`python -m bench history`: what one write costs as a single-valued relation's history grows.

One scope with one single-valued relation ("heart rate is"); `values` writes, each `add_facts` of
one new value, an hour after the one before (a history written in time order), then as many
without a start (each starts when memory learns it). Prints the p50 of the first and last
`window` writes of each kind and their ratio: a write reads the facts that hold at its start or
after it (`writing.reconcile_statements.met_facts`), so a history in time order should cost about
the same at its end as at its start; one without a start reads what holds when memory learns it
and the values that ended last, so it should too.
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import bench_memory, environment, markdown_table
from bench.hashembed import HashEmbedder
from memsoda_core import Memory, ScopeArgs

PREDICATE = "heart rate is"
SCOPE: ScopeArgs = {"dataset": "bench-history", "project": "p"}
START = datetime(2020, 1, 1, tzinfo=UTC)


def _timed_writes(memory: Memory, facts: list[dict[str, Any]]) -> list[float]:
    samples = []
    for fact in facts:
        started = time.perf_counter()
        memory.add_facts([fact], **SCOPE)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def run(*, values: int = 2_000, window: int = 100) -> str:
    """The markdown of `python -m bench history`."""
    window = min(window, values)
    with bench_memory(HashEmbedder()) as memory:
        memory.set_single_valued([PREDICATE], **SCOPE)
        dated = [
            {
                "subject": "user",
                "predicate": PREDICATE,
                "object": f"{60 + i % 40} bpm, reading {i}",
                "valid_at": (START + timedelta(hours=i)).isoformat(),
            }
            for i in range(values)
        ]
        undated = [
            {"subject": "user", "predicate": PREDICATE, "object": f"{60 + i % 40} bpm, undated reading {i}"}
            for i in range(values)
        ]
        rows = []
        for label, facts in (("with a start, in time order", dated), ("without a start", undated)):
            samples = _timed_writes(memory, facts)
            first, last = statistics.median(samples[:window]), statistics.median(samples[-window:])
            rows.append([label, f"{first:.2f}", f"{last:.2f}", f"{last / first:.2f}x"])
        live = memory.list_facts(**SCOPE, predicate=PREDICATE).facts
        return (
            f"## One write into a growing single-valued history ({values:,} values of each kind)\n\n"
            f"{environment(memory.dsn)}\n\n"
            + markdown_table(
                ["add_facts of one new value", f"p50 ms, first {window}", f"p50 ms, last {window}", "last / first"],
                rows,
            )
            + f"\nLive values of the relation at the end: {len(live)} (one expected).\n"
        )
