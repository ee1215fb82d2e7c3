"""One tree's side of `bench.ab_recall`: recall each query index read from stdin, print its wall
time (ms) and fact count. Run by `bench.trees.start_worker` with the tree first on PYTHONPATH.

argv: dsn schema queries.json project dims
"""

from __future__ import annotations

import json
import sys
import time

from bench.hashembed import HashEmbedder
from memsoda_core import Memory


def main(argv: list[str]) -> None:
    """Open the store, print "ready", then answer each query index on stdin until it closes."""
    dsn, schema, path, project, dims = argv
    with open(path) as file:
        queries = json.load(file)
    with Memory.open(dsn, HashEmbedder(int(dims)), schema=schema) as memory:
        print("ready", flush=True)
        for line in sys.stdin:
            q = queries[int(line)]
            start = time.perf_counter()
            result = memory.recall(q["text"], dataset=q["dataset"], project=project, query_embedding=q["values"])
            print(f"{(time.perf_counter() - start) * 1000:.4f} {len(result.facts)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
