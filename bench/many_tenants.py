"""`python -m bench tenants`: many large tenants on a partitioned store, side by side (issue 28).

One embedded server holds one schema per step of `steps` (10, 300, 1,000 by default), each with the
same `tenants` tenants of `small_facts` facts (written by SQL, as `bench.tenant_layout` does), of
which the first K grew to `large_facts` facts and moved to partitions of their own by memsoda's own
operation (`tenant_index_min_facts` 20). Once every store is vacuumed and autovacuum has left them
(`bench.common.settle`, before each timed part), the stores alternate call by call, so each ratio
between two steps is measured in one run on the same machine load:

- a new large tenant's first move (5 per store, the stores taking turns);
- `add_facts` of one fact into a random large tenant, and into a random small one;
- `recall` of a random large tenant, and of one large tenant again and again (its plans kept).

Then `threads` clients write and recall at random over the last store's tenants for `seconds`,
counting errors.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.common import environment, markdown_table, settle
from bench.tenant_layout import _one, _tenant, concurrent, load, make_large, tenant_stores
from memsoda_core import Memory
from memsoda_core.validation import Scope

MOVES = 5
"""New large tenants timed per store."""


def _schema(step: int) -> str:
    return f"k{step}"


def timed_calls(
    memories: dict[int, Memory], tenants: int, calls: int, rng: random.Random
) -> dict[tuple[str, int], float]:
    """(case, step) -> p50 ms, the stores alternating call by call (their order turning); a small
    tenant is one of the `tenants` that no store has moved."""
    cases: dict[str, tuple[Callable[[int, int], Scope], Callable[[Memory, Scope, int], Any]]] = {
        "add_facts(1), random large tenant": (
            lambda step, n: _tenant(rng.randrange(step)),
            lambda m, s, n: m.add_facts([_one(n)], **vars(s)),
        ),
        "add_facts(1), random small tenant": (
            lambda step, n: _tenant(rng.randrange(step + MOVES, tenants)),
            lambda m, s, n: m.add_facts([_one(n)], **vars(s)),
        ),
        "recall, random large tenant": (
            lambda step, n: _tenant(rng.randrange(step)),
            lambda m, s, n: m.recall(f"note {n % 25}", **vars(s)),
        ),
        "recall, one large tenant again": (
            lambda step, n: _tenant(0),
            lambda m, s, n: m.recall(f"note {n % 25}", **vars(s)),
        ),
    }
    out: dict[tuple[str, int], float] = {}
    steps = list(memories)
    for case, (pick, call) in cases.items():
        samples: dict[int, list[float]] = {step: [] for step in steps}
        for n in range(calls + 10):
            for step in steps[n % len(steps) :] + steps[: n % len(steps)]:
                scope = pick(step, n)
                started = time.perf_counter()
                call(memories[step], scope, n)
                if n >= 10:  # warm-up: the pool's connections, the shared plans
                    samples[step].append((time.perf_counter() - started) * 1000)
        out.update({(case, step): statistics.median(values) for step, values in samples.items()})
    return out


def run(
    *,
    tenants: int = 10_000,
    small_facts: int = 10,
    large_facts: int = 25,
    steps: Sequence[int] = (10, 300, 1_000),
    calls: int = 200,
    seconds: float = 30.0,
    threads: int = 16,
) -> str:
    """The markdown of `python -m bench tenants`."""
    rng = random.Random(28)
    lines = [
        f"## Many large tenants: {tenants:,} tenants of {small_facts} facts, K of them moved at {large_facts}\n",
        "",
    ]
    with tenant_stores({step: {"schema": _schema(step)} for step in steps}, threads) as stores:
        memories, conns = stores.memories, stores.conns
        lines[1] = environment(stores.dsn)
        for step, conn in conns.items():
            started = time.perf_counter()
            load(conn, _schema(step), 0, tenants - 1, small_facts, partitioned=True)
            load(
                conn,
                _schema(step),
                0,
                step + MOVES - 1,
                large_facts - small_facts,
                offset=small_facts,
                partitioned=True,
            )
            for n in range(step):
                make_large(memories[step], conn, _tenant(n))
            lines.append(f"- {_schema(step)}: loaded and {step} tenants moved in {time.perf_counter() - started:.0f} s")
        _settle(stores.dsn, steps)
        moves: dict[int, list[float]] = {step: [] for step in steps}
        for n in range(MOVES):
            for step in steps:
                moves[step].append(make_large(memories[step], conns[step], _tenant(step + n)) * 1000)
        _settle(stores.dsn, steps)
        calls_p50 = timed_calls(memories, tenants, calls, rng)
        base_step = steps[0]
        header = ["", *(f"{step} large" for step in steps), *(f"{s} / {base_step}" for s in steps[1:])]
        rows: list[list[Any]] = []
        move_ms = {step: statistics.median(values) for step, values in moves.items()}
        rows.append(_row(f"a new large tenant's move, median of {MOVES}, ms", move_ms, steps))
        for case in dict.fromkeys(case for case, _ in calls_p50):
            rows.append(_row(f"{case}, p50 ms", {step: calls_p50[(case, step)] for step in steps}, steps))
        lines.append(f"\nThe stores alternating call by call ({calls} calls per case and store):\n")
        lines.append(markdown_table(header, rows))
        last = steps[-1]
        writes, recalls, errors = concurrent(memories[last], tenants, seconds, threads)
        lines.append(
            f"\nConcurrency, {last + MOVES} large tenants among {tenants:,}: {threads} clients for {seconds:.0f} s,"
            f" {writes} add_facts and {recalls} recalls, {len(errors)} errors {sorted(set(errors))[:3]}"
        )
    return "\n".join(lines) + "\n"


def _settle(dsn: str, steps: Sequence[int]) -> None:
    """Every store vacuumed and no autovacuum on them: what is timed next is not measured beside the
    vacuum of the loads and moves before it (`bench.common.settle`)."""
    for step in steps:
        settle(dsn, _schema(step))


def _row(label: str, by_step: dict[int, float], steps: Sequence[int]) -> list[Any]:
    base = by_step[steps[0]]
    return [label, *(f"{by_step[s]:.2f}" for s in steps), *(f"{by_step[s] / base:.2f}x" for s in steps[1:])]
