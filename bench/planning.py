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

One store (an embedded server) holds `small` tenants besides the measured one, loaded with COPY.
Each tree runs in a worker process of its own (its `memsoda_core` on PYTHONPATH) with a Memory on
that store. For every query each tree recalls (the result's digest: facts, scores, ranks, reasons,
context), and for the first `--plans` queries also measures its statement on the plan and
parameters that recall used; the trees take turns in a rotating order.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import synth
from bench.common import bench_memory, connect, percentiles
from bench.hashembed import HashEmbedder

WORKER = """
import hashlib, json, sys, time
from dataclasses import replace
import psycopg
from bench.common import connect
from bench.hashembed import HashEmbedder
from memsoda_core import Memory, RecallOptions
from memsoda_core.options import RecentOptions
from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.recall import operation
from memsoda_core.recall.signals import planned_signals
from memsoda_core.recall.statements import hits_statement, kept_hits_statement, rendered
from memsoda_core.validation import Scope

dsn, schema, path, project, dims, recent, talk = sys.argv[1:8]
options = RecallOptions(recent=RecentOptions(candidates=int(recent))) if int(recent) else None
queries = json.load(open(path))
seen = {}
executes = operation._executes


def spy(info, plan, access, params, scope_facts):
    seen.update(plan=plan, params=params)
    return executes(info, plan, access, params, scope_facts)


operation._executes = spy


def parts(plan, scope):
    named = ScopeAccess(named=scope)
    exact = replace(plan, exact=True)
    out = {
        "whole": kept_hits_statement(schema, plan, named),
        "whole, tenant bound": kept_hits_statement(schema, plan, SHARED),
        "signals alone": rendered(hits_statement(schema, exact, planned_signals(plan), named)),
    }
    for name in planned_signals(plan):
        out[name] = rendered(hits_statement(schema, exact, (name,), named))
    if "anchor" in plan.signals:
        out["anchor, hops=1"] = rendered(hits_statement(schema, replace(exact, hops=1), ("anchor",), named))
    return out


def planning_ms(conn, statement, params):
    with psycopg.RawCursor(conn) as cur:
        cur.execute(b"EXPLAIN (SUMMARY, FORMAT JSON) " + statement.query, statement.bind(params), prepare=False)
        return cur.fetchone()[0][0]["Planning Time"]


def wall_ms(conn, statement, params, prepare):
    with psycopg.RawCursor(conn) as cur:
        start = time.perf_counter()
        cur.execute(statement.query, statement.bind(params), prepare=prepare)
        cur.fetchall()
        return (time.perf_counter() - start) * 1000


with Memory.open(dsn, HashEmbedder(int(dims)), schema=schema) as memory, connect(dsn) as conn:
    print("ready", flush=True)
    for line in sys.stdin:
        i, measure = (int(x) for x in line.split())
        q = queries[i]
        conversation = [{"role": "user", "content": queries[i - 1]["text"]}] if int(talk) and i else None
        result = memory.recall(
            q["text"], dataset=q["dataset"], project=project, query_embedding=q["values"], options=options,
            conversation=conversation,
        )
        shown = (result.context, result.facts, result.entities, result.degraded, result.fusion)
        out = {"digest": hashlib.sha256(repr(shown).encode()).hexdigest(), "facts": len(result.facts)}
        if measure:
            plan, params = seen["plan"], seen["params"]
            statements = parts(plan, Scope(dataset=q["dataset"], project=project))
            out["planning"] = {name: planning_ms(conn, s, params) for name, s in statements.items()}
            whole = statements["whole"]
            out["unnamed"] = min(wall_ms(conn, whole, params, False) for _ in range(2))
            out["prepared"] = min(wall_ms(conn, whole, params, True) for _ in range(2))
            out["bytes"] = len(whole.query)
        print(json.dumps(out), flush=True)
"""


def main() -> None:
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
    embedder = HashEmbedder()
    dims = int(embedder.dimensions)
    words = synth.vocabulary(3000, random.Random(7))
    with bench_memory(embedder) as memory, tempfile.TemporaryDirectory() as tmp:
        tenants = [
            synth.generate(synth.Tenant(project=f"other{i:03d}", facts=1000), dims=dims, words=words, seed=i)
            for i in range(args.small)
        ]
        measured = synth.generate(synth.Tenant(project="measured", facts=args.facts), dims=dims, words=words, seed=99)
        tenants.append(measured)
        with connect(memory.dsn) as conn:
            synth.load(conn, memory.info.schema, tenants)
        memory.maintain()
        qs = synth.queries(measured, args.warmup + args.queries, words=words, seed=7)
        path = Path(tmp) / "queries.json"
        path.write_text(json.dumps([{"text": q.text, "values": list(q.values), "dataset": synth.DATASET} for q in qs]))
        workers = {}
        for name, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": f"{tree}:{Path(__file__).resolve().parent.parent}"}
            argv = [sys.executable, "-c", WORKER, memory.dsn, memory.info.schema, str(path), "measured", str(dims)]
            argv += [str(args.recent), str(int(args.conversation))]
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            workers[name] = proc
        replies: dict[str, list[dict[str, Any]]] = {name: [] for name in workers}
        names = list(workers)
        for i in range(len(qs)):
            measure = int(i < args.warmup + args.plans)
            for name in names[i % len(names) :] + names[: i % len(names)]:
                proc = workers[name]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"{i} {measure}\n")
                proc.stdin.flush()
                reply = json.loads(proc.stdout.readline())
                if i >= args.warmup:
                    replies[name].append(reply)
        for proc in workers.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
    report(args, replies)


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
