"""The write cost of reconciliation: `add_facts` of 4 facts, p50 / p95 over CALLS calls into a scope
of SEED facts, vectors given (no model in the timing). Run from a tree's root so that tree's
`memsoda_core` is imported: `python -m bench.reconcile_write --dsn ... --schema ...`."""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import memsoda_core
from bench.hashembed import HashEmbedder
from memsoda_core import Memory

DIMENSIONS = 384


def _facts(start: int, count: int) -> list[dict[str, object]]:
    return [
        {"subject": f"user {i % 50}", "predicate": f"likes thing {i % 7}", "object": f"item {i}"}
        for i in range(start, start + count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    scope = {"dataset": f"bench-{time.time_ns()}", "project": "p"}
    with Memory.open(args.dsn, HashEmbedder(DIMENSIONS), schema=args.schema) as memory:
        seed = _facts(0, args.seed)
        for start in range(0, len(seed), 500):
            chunk = seed[start : start + 500]
            memory.add_facts(chunk, **scope, vectors=rng.standard_normal((len(chunk), DIMENSIONS)))
        timings = []
        for call in range(args.calls):
            facts = _facts(args.seed + 4 * call, 4)
            vectors = rng.standard_normal((4, DIMENSIONS))
            began = time.perf_counter()
            memory.add_facts(facts, **scope, vectors=vectors)
            timings.append((time.perf_counter() - began) * 1000)
        memory.forget(**scope)
    timings.sort()
    print(
        json.dumps(
            {
                "package": memsoda_core.__file__,
                "p50_ms": round(statistics.median(timings), 2),
                "p95_ms": round(timings[int(0.95 * len(timings))], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
