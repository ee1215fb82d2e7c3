"""`python -m bench.ab_recall --tree A=/path --tree B=/path`: recall p50 of two source trees side by
side in one run, against the bare filtered kNN (the floor of `bench speed`).

One store (an embedded server) holds `small` tenants of `facts` facts each, loaded with COPY. Each
tree runs in a worker process of its own (its `memsoda_core` on PYTHONPATH) with a Memory on that
store; the coordinator sends each query to every tree and runs the floor, in a rotating order, so
drift in the machine's load reaches them alike. Precomputed query vectors (no model).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from psycopg import sql

from bench import synth
from bench.common import bench_memory, connect, percentiles
from bench.hashembed import HashEmbedder
from bench.speed import FLOOR

WORKER = """
import json, sys, time
from bench.hashembed import HashEmbedder
from memsoda_core import Memory
dsn, schema, path, project = sys.argv[1:5]
queries = json.load(open(path))
with Memory.open(dsn, HashEmbedder(int(sys.argv[5])), schema=schema) as memory:
    print("ready", flush=True)
    for line in sys.stdin:
        q = queries[int(line)]
        start = time.perf_counter()
        result = memory.recall(q["text"], dataset=q["dataset"], project=project, query_embedding=q["values"])
        print(f"{(time.perf_counter() - start) * 1000:.4f} {len(result.facts)}", flush=True)
"""


def main() -> None:
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
    embedder = HashEmbedder()
    dims = int(embedder.dimensions)
    words = synth.vocabulary(3000, random.Random(7))
    with bench_memory(embedder) as memory, tempfile.TemporaryDirectory() as tmp:
        tenants = [
            synth.generate(
                synth.Tenant(project=f"other{i:03d}", facts=args.other_facts), dims=dims, words=words, seed=i
            )
            for i in range(args.small)
        ]
        measured = synth.generate(synth.Tenant(project="measured", facts=args.facts), dims=dims, words=words, seed=99)
        tenants.append(measured)
        with connect(memory.dsn) as conn:
            synth.load(conn, memory.info.schema, tenants)
        memory.maintain()
        qs = synth.queries(measured, args.warmup + args.queries, words=words, seed=7)
        texts = [" ".join(qs[(i + j) % len(qs)].text for j in range(args.join)) for i in range(len(qs))]
        path = Path(tmp) / "queries.json"
        rows_out = [
            {"text": text, "values": list(q.values), "dataset": synth.DATASET}
            for text, q in zip(texts, qs, strict=True)
        ]
        path.write_text(json.dumps(rows_out))
        workers = {}
        for name, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": f"{tree}:{Path(__file__).resolve().parent.parent}"}
            argv = [sys.executable, "-c", WORKER, memory.dsn, memory.info.schema, str(path), "measured", str(dims)]
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            workers[name] = proc
        floor = sql.SQL(FLOOR).format(s=sql.Identifier(memory.info.schema))
        samples: dict[str, list[float]] = {name: [] for name in [*workers, "floor"]}
        rows: dict[str, list[int]] = {name: [] for name in samples}
        with connect(memory.dsn) as conn:

            def run(name: str, i: int) -> tuple[float, int]:
                if name == "floor":
                    start = time.perf_counter()
                    got = conn.execute(
                        floor, {"dataset": synth.DATASET, "project": "measured", "qvec": qs[i].vector}
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
                    if i >= args.warmup:
                        samples[name].append(ms)
                        rows[name].append(count)
        for proc in workers.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
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


if __name__ == "__main__":
    main()
