"""`python -m bench.planning --tree A=/path --tree B=/path`: what a small scope's recall statement
costs PostgreSQL to parse and plan, per tree, side by side in one run; and whether the trees'
recall results are identical.

A small scope's recall is one statement (`statements.kept_hits_statement`). One node prepares it
and keeps its plan; Citus sends it to the worker unnamed, which parses and plans it at every call
(bench/RESULTS.md, "Where a small tenant's recall goes on Citus"). So what this prints is the
fresh cost of the statement as each tree writes it, on one node:

- planning: `EXPLAIN (SUMMARY)`'s planning time (unnamed, so planned afresh), of the whole statement
  and of its parts: the signals alone (`hits_statement`, no kept facts' join), each signal alone, the
  anchor signal with one hop; in the Citus form (the tenant named as literals, `ScopeAccess.named`)
  and, for the whole, the one-node form (the tenant bound);
- wall time of the whole statement run unnamed (parsed and planned at every call, as a Citus worker
  does) against prepared (its plan kept, as one node runs it), both the Citus form;
- its text's length.

One store (`bench.trees.shared_store`) holds `small` tenants besides the measured one. Each tree
runs in a worker process of its own (`bench/_planning_worker.py`, its tree first on PYTHONPATH) with
a Memory on that store. For every query each tree recalls (the digest of the result's `to_dict`
but its timings: facts, scores, ranks, reasons, context), and for the first `--plans` queries also measures its
statement on the plan and parameters that recall used; the trees take turns in a rotating order.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

from bench import synth
from bench.common import percentiles
from bench.trees import MEASURED, shared_store, start_worker, stop_workers

WORKER = Path(__file__).resolve().parent / "_planning_worker.py"
"""Each tree's worker (`bench.trees.start_worker`)."""


def main() -> None:
    """Load the store, start one worker per tree, send every query to each in a rotating order and
    print the planning table and the results' agreement; the workers are stopped however it ends."""
    parser = argparse.ArgumentParser(prog="python -m bench.planning")
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a source tree")
    parser.add_argument("--small", type=int, default=10, help="tenants besides the measured one")
    parser.add_argument("--facts", type=int, default=1000, help="facts of the measured tenant")
    parser.add_argument("--queries", type=int, default=100, help="queries recalled (results compared)")
    parser.add_argument("--plans", type=int, default=40, help="of which the first N also measure the statement")
    parser.add_argument("--warmup", type=int, default=5, help="queries measured but not counted")
    parser.add_argument("--recent", type=int, default=0, help="recent.candidates (0: the memory's choice)")
    parser.add_argument(
        "--conversation", action="store_true", help="the query before as the conversation (its signal runs)"
    )
    args = parser.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    with shared_store(small=args.small, facts=args.facts, other_facts=1000, count=args.warmup + args.queries) as store:
        memory, qs = store.memory, store.queries
        path = store.directory / "queries.json"
        path.write_text(json.dumps([{"text": q.text, "values": list(q.values), "dataset": synth.DATASET} for q in qs]))
        workers: dict[str, subprocess.Popen[str]] = {}
        try:
            for name, tree in trees.items():
                argv = [memory.dsn, memory.info.schema, str(path), MEASURED]
                argv += [str(store.dims), str(args.recent), str(int(args.conversation))]
                workers[name] = start_worker(tree, WORKER, argv)
            replies = _run(workers, len(qs), args.warmup, args.plans)
        finally:
            stop_workers(workers.values())
    report(args, replies)


def _run(
    workers: dict[str, subprocess.Popen[str]], queries: int, warmup: int, plans: int
) -> dict[str, list[dict[str, Any]]]:
    """Every query to every worker, the trees in a rotating order; the replies after the warmup."""
    replies: dict[str, list[dict[str, Any]]] = {name: [] for name in workers}
    names = list(workers)
    for i in range(queries):
        measure = int(i < warmup + plans)
        for name in names[i % len(names) :] + names[: i % len(names)]:
            proc = workers[name]
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(f"{i} {measure}\n")
            proc.stdin.flush()
            reply = json.loads(proc.stdout.readline())
            if i >= warmup:
                replies[name].append(reply)
    return replies


def report(args: argparse.Namespace, replies: dict[str, list[dict[str, Any]]]) -> None:
    """The planning table (p50 ms per part and tree, ratios to the first tree) and the results' agreement."""
    names = list(replies)
    first = names[0]
    print(f"measured tenant {args.facts:,} facts; {args.queries} queries compared, {args.plans} measured (p50 ms)")
    measured = {name: [r for r in rows if "planning" in r] for name, rows in replies.items()}
    if args.plans:
        _table(names, measured)
    for name in names[1:]:
        same = sum(a["digest"] == b["digest"] for a, b in zip(replies[first], replies[name], strict=True))
        print(f"results identical, {name} against {first}: {same}/{len(replies[first])}")


def _table(names: list[str], measured: dict[str, list[dict[str, Any]]]) -> None:
    first = names[0]
    parts = list(dict.fromkeys(p for rows in measured.values() for r in rows for p in r["planning"]))
    print("| part | " + " | ".join(names) + " | " + " | ".join(f"{n} / {first}" for n in names[1:]) + " |")
    print("|---|" + "---|" * (2 * len(names) - 1))

    def p50(name: str, key: str, part: str | None = None) -> float | None:
        values = [float(r[key][part] if part else r[key]) for r in measured[name] if part is None or part in r[key]]
        return percentiles(values)["p50"] if values else None

    rows = [(f"planning: {part}", "planning", part) for part in parts]
    rows += [("wall: unnamed (parse + plan + run)", "unnamed", None), ("wall: prepared (kept plan)", "prepared", None)]
    rows += [("text bytes", "bytes", None)]
    for label, key, part in rows:
        values = [p50(name, key, part) for name in names]
        shown = ["-" if v is None else (f"{v:,.0f}" if key == "bytes" else f"{v:.3f}") for v in values]
        ratios = ["-" if v is None or values[0] in (None, 0) else f"{v / values[0]:.2f}x" for v in values[1:]]
        print(f"| {label} | " + " | ".join(shown) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
