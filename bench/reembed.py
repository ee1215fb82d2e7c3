"""`python -m bench reembed`: moving a store to another embedding model online (`Memory.reembed`).

One embedded server, two schemas. The store to move is filled with the old model (the hash
embedder: cheap to fill) and re-embedded with the new one; the same facts are written by plain
`add_facts` with the new model into an empty schema, for the throughput to compare. Recall on the
old model runs in a thread throughout the re-embed (and before it, for the baseline), so its
latency during the run includes the new model's use of the cores.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

from bench.common import environment, markdown_table, percentiles, timed
from bench.hashembed import HashEmbedder
from memsoda_core import Memory
from memsoda_core import server as embedded
from memsoda_core.embedders import Embedder
from memsoda_core.errors import MemsodaError

QUERIES = ("what does person 7 like", "who likes thing 42", "anything about thing 3", "what does person 12 own")


def _facts(scope: int, count: int) -> list[dict[str, Any]]:
    return [
        {"subject": f"person {scope}-{i % 50}", "predicate": "likes", "object": f"thing {scope}-{i}"}
        for i in range(count)
    ]


def _fill(memory: Memory, scopes: int, per_scope: int, large: int) -> int:
    """Write the bench's facts: `scopes` scopes of `per_scope` facts and one of `large` (its own
    partitions and indexes); returns how many."""
    plan = [(f"s{n}", per_scope) for n in range(scopes)] + [("large", large)]
    for n, (dataset, count) in enumerate(plan):
        facts = _facts(n, count)
        for start in range(0, count, 100):
            memory.add_facts(facts[start : start + 100], dataset=dataset, project="bench")
    return sum(count for _, count in plan)


def _recalls(memory: Memory, stop: threading.Event, samples: list[float], errors: list[str]) -> None:
    """Recall in a loop until `stop`: each one's milliseconds, or its error."""
    n = 0
    while not stop.is_set():
        query, dataset = QUERIES[n % len(QUERIES)], f"s{n % 2}"
        try:
            samples.append(timed(partial(memory.recall, query, dataset=dataset, project="bench")))
        except MemsodaError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        n += 1


def run(new: Embedder, *, scopes: int = 8, per_scope: int = 500, large: int = 2_500, batch_size: int = 256) -> str:
    home = Path(tempfile.mkdtemp(prefix="memsoda-bench-reembed-"))
    pgdata, uri = embedded.acquire(home)
    try:
        old = HashEmbedder(384)
        with Memory.open(uri, old, schema="moved") as memory:
            facts = _fill(memory, scopes, per_scope, large)
            memory.maintain()
        # plain add_facts of the same facts with the new model, in batches of 100
        with Memory.open(uri, new, schema="written") as written:
            start = time.perf_counter()
            _fill(written, scopes, per_scope, large)
            add_s = time.perf_counter() - start
        with Memory.open(uri, old, schema="moved") as reader, Memory.open(uri, old, schema="moved") as mover:
            before: list[float] = []
            errors: list[str] = []
            stop = threading.Event()
            thread = threading.Thread(target=_recalls, args=(reader, stop, before, errors))
            thread.start()
            time.sleep(10)
            stop.set()
            thread.join()
            during: list[float] = []
            stop = threading.Event()
            thread = threading.Thread(target=_recalls, args=(reader, stop, during, errors))
            thread.start()
            start = time.perf_counter()
            report = mover.reembed(new, batch_size=batch_size)
            reembed_s = time.perf_counter() - start
            stop.set()
            thread.join()
        rows = report.embedded + report.caught_up
        late = [e for e in errors if "different vector dimensions" in e]  # the reader on the old model
        early = [e for e in errors if e not in late]
        b, d = percentiles(before), percentiles(during)
        table = markdown_table(
            ("measure", "plain add_facts", "reembed"),
            [
                ("facts", facts, facts),
                ("rows embedded (facts + entity names)", "-", rows),
                ("seconds", add_s, reembed_s),
                ("facts/s", facts / add_s, facts / reembed_s),
                ("embedded rows/s", "-", rows / reembed_s),
            ],
        )
        recall = markdown_table(
            ("recall on the old model", "recalls", "p50 ms", "p95 ms", "max ms"),
            [
                ("before the run (10 s)", len(before), b["p50"], b["p95"], max(before)),
                ("during the run", len(during), d["p50"], d["p95"], max(during)),
            ],
        )
        return (
            f"{environment(uri)}\n\nnew model {new.model!r} ({new.dimensions} dimensions), batch_size {batch_size}; "
            f"{scopes} scopes of {per_scope} facts and one of {large} (own partitions and HNSW); "
            f"indexes rebuilt: {', '.join(report.indexes)}; recall errors before the switch: {len(early)} {early[:1]}; "
            f"after it, the old-model reader's recalls fail ({len(errors) - len(early)}: {late[:1]})\n\n"
            f"{table}\n\n{recall}\n"
        )
    finally:
        embedded.release(pgdata)
        shutil.rmtree(home, ignore_errors=True)
