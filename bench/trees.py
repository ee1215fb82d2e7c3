"""Source trees side by side (`bench.ab_recall`, `bench.planning`): one synthetic store they all
read, and a worker process per tree that imports `memsoda_core` from that tree.

The store is one embedded server holding `small` tenants of `other_facts` facts besides the measured
tenant ("measured", `facts` facts), loaded with COPY and maintained as memsoda would (its own
indexes for a large tenant); its queries are the measured tenant's synthetic ones, with vectors.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import synth
from bench.common import bench_memory, connect, settle
from bench.hashembed import HashEmbedder
from memsoda_core import Memory

MEASURED = "measured"
"""The measured tenant's project."""

_REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class SharedStore:
    """What every tree's worker reads: the store's Memory (for its DSN and schema), the embedding
    dimension, the measured tenant's queries and a directory that lives as long as the store."""

    memory: Memory
    dims: int
    queries: list[synth.SynthQuery]
    directory: Path


@contextmanager
def shared_store(*, small: int, facts: int, other_facts: int, count: int) -> Iterator[SharedStore]:
    """The store of `small` other tenants and the measured one, with `count` queries of the measured
    tenant; the server and the directory go when the block ends."""
    embedder = HashEmbedder()
    dims = int(embedder.dimensions)
    words = synth.vocabulary(3000, random.Random(7))
    with bench_memory(embedder) as memory, tempfile.TemporaryDirectory() as tmp:
        tenants = [
            synth.generate(synth.Tenant(project=f"other{i:03d}", facts=other_facts), dims=dims, words=words, seed=i)
            for i in range(small)
        ]
        measured = synth.generate(synth.Tenant(project=MEASURED, facts=facts), dims=dims, words=words, seed=99)
        tenants.append(measured)
        with connect(memory.dsn) as conn:
            synth.load(conn, memory.info.schema, tenants)
        memory.maintain()
        settle(memory.dsn, memory.info.schema)
        queries = synth.queries(measured, count, words=words, seed=7)
        yield SharedStore(memory=memory, dims=dims, queries=queries, directory=Path(tmp))


def start_worker(tree: str, script: Path, args: Sequence[str]) -> subprocess.Popen[str]:
    """`script` (a file of this repository's bench) run by path with `python -P`, `tree` first on
    PYTHONPATH and as the working directory, so it imports `memsoda_core` from `tree` (and this
    repository's bench after it); returned once it printed "ready"."""
    env = {**os.environ, "PYTHONPATH": f"{tree}:{_REPO}"}
    argv = [sys.executable, "-P", str(script), *args]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        stop_workers([proc])
        raise RuntimeError(f"the worker of {tree} did not start")
    return proc


def stop_workers(workers: Iterable[subprocess.Popen[str]]) -> None:
    """End each worker: its stdin closed (it finishes its query and exits), killed if it does not."""
    workers = list(workers)
    for proc in workers:
        if proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):  # it had exited already
                proc.stdin.close()
    for proc in workers:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
