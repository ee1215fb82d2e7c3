"""`python -m bench.ab_recall --tree A=/path --tree B=/path`: recall p50 of two source trees side by
side in one run, against the bare filtered kNN (the floor of `bench speed`).

One store (`bench.trees.shared_store`) holds `small` tenants besides the measured one. Each tree runs
in a worker process of its own (`bench/_ab_recall_worker.py`, its `memsoda_core` first on PYTHONPATH)
with a Memory on that store; the coordinator sends each query to every tree and runs the floor, in
a rotating order, so drift in the machine's load reaches them alike. Precomputed query vectors (no
model).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from psycopg import sql

from bench import synth
from bench.common import connect, percentiles
from bench.speed import FLOOR
from bench.trees import MEASURED, shared_store, start_worker, stop_workers
from memsoda_core import Memory

WORKER = Path(__file__).resolve().parent / "_ab_recall_worker.py"
"""Each tree's worker (`bench.trees.start_worker`)."""


def main() -> None:
    """Load the store, start one worker per tree, time every query on each and on the floor, and
    print the table; the workers are stopped however it ends."""
    parser = argparse.ArgumentParser(prog="python -m bench.ab_recall")
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a source tree")
    parser.add_argument("--small", type=int, default=10, help="tenants besides the measured one")
    parser.add_argument("--facts", type=int, default=1000, help="facts of the measured tenant")
    parser.add_argument("--other-facts", type=int, default=1000, help="facts of each other tenant")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument(
        "--join",
        type=int,
        default=1,
        help="each query's text is this many synthetic query texts joined (a long message, like the user "
        "turns a remember window recalls its related facts by); its vector is the first one's",
    )
    args = parser.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    with shared_store(
        small=args.small, facts=args.facts, other_facts=args.other_facts, count=args.warmup + args.queries
    ) as store:
        memory, qs = store.memory, store.queries
        texts = [" ".join(qs[(i + j) % len(qs)].text for j in range(args.join)) for i in range(len(qs))]
        path = store.directory / "queries.json"
        rows_out = [
            {"text": text, "values": list(q.values), "dataset": synth.DATASET}
            for text, q in zip(texts, qs, strict=True)
        ]
        path.write_text(json.dumps(rows_out))
        workers: dict[str, subprocess.Popen[str]] = {}
        try:
            for name, tree in trees.items():
                workers[name] = start_worker(
                    tree, WORKER, [memory.dsn, memory.info.schema, str(path), MEASURED, str(store.dims)]
                )
            samples, rows = _measure(memory, workers, qs, args.warmup)
        finally:
            stop_workers(workers.values())
    base = percentiles(samples["floor"])["p50"]
    joined = f", each {args.join} query texts joined" if args.join > 1 else ""
    print(
        f"measured tenant {args.facts:,} facts among {args.small} of {args.other_facts:,};"
        f" {args.queries} queries{joined}"
    )
    print("| system | p50 ms | p95 ms | p50 / floor | rows |")
    print("|---|---|---|---|---|")
    for name, timed in samples.items():
        p = percentiles(timed)
        print(
            f"| {name} | {p['p50']:.2f} | {p['p95']:.2f} | {p['p50'] / base:.2f}x | "
            f"{sum(rows[name]) / len(rows[name]):.1f} |"
        )


def _measure(
    memory: Memory, workers: dict[str, subprocess.Popen[str]], qs: Sequence[synth.SynthQuery], warmup: int
) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Each query sent to every tree and run as the floor, in a rotating order: the wall times (ms)
    and fact counts after the first `warmup` queries, per system."""
    floor = sql.SQL(FLOOR).format(s=sql.Identifier(memory.info.schema))
    samples: dict[str, list[float]] = {name: [] for name in [*workers, "floor"]}
    rows: dict[str, list[int]] = {name: [] for name in samples}
    with connect(memory.dsn) as conn:

        def run(name: str, i: int) -> tuple[float, int]:
            if name == "floor":
                start = time.perf_counter()
                got = conn.execute(
                    floor, {"dataset": synth.DATASET, "project": MEASURED, "qvec": qs[i].vector}
                ).fetchall()
                return (time.perf_counter() - start) * 1000, len(got)
            proc = workers[name]
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(f"{i}\n")
            proc.stdin.flush()
            ms, count = proc.stdout.readline().split()
            return float(ms), int(count)

        names = list(samples)
        for i in range(len(qs)):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                ms, count = run(name, i)
                if i >= warmup:
                    samples[name].append(ms)
                    rows[name].append(count)
    return samples, rows


if __name__ == "__main__":
    main()
