"""`python -m bench layout`: the two tenant layouts side by side, on the same store (issue 19).

- **plain**: one table of each kind for every tenant; a large tenant gets partial HNSW and GIN
  indexes on them (`store.tenant_index`): memsoda's only layout before, and Citus' now.
- **partitioned**: the default (`store.layout`): a large tenant moves to partitions of its own.

Both schemas live on one server and hold the same tenants: `tenants` small ones of `small_facts`
facts (random unit vectors from a pool, one entity per tenant, written by SQL), of which the first
K grow to `large_facts` facts and are then made large by memsoda's own operation
(`ops.ensure_tenant_indexes`: partial indexes, or the move and the leaf indexes), for each K of
`steps`. At each step, memsoda's public calls are timed with the two stores alternating call by
call: `add_facts` of one fact and `recall`, into random small and large tenants. Making the last
five tenants large is timed, while a probe reads a small tenant every few milliseconds and records
its slowest read: how long a move holds the other tenants up. Then the partitioned store runs
`threads` sessions of random writes and recalls for `seconds`.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import numpy as np
import psycopg
from psycopg import sql

from bench.common import bench_memory, connect, environment, markdown_table
from bench.hashembed import HashEmbedder
from memsoda_core import Memory
from memsoda_core.layouts import REGISTRY
from memsoda_core.ops import ensure_tenant_indexes
from memsoda_core.runner.sync_runner import Runner
from memsoda_core.validation import Scope

LAYOUTS = ("plain", "partitioned")
PROJECT = "proj"
POOL = 2_000
THRESHOLD = 20
"""`tenant_index_min_facts`: small tenants stay under it (a timed write adds one fact), large ones
hold more."""

K = TypeVar("K")


def _tenant(n: int) -> Scope:
    return Scope(dataset=f"user-{n:05d}", project=PROJECT)


def _q(template: str, schema: str, **parts: Any) -> sql.Composed:
    return sql.SQL(template).format(s=sql.Identifier(schema), **parts)


@dataclass(frozen=True)
class Stores(Generic[K]):
    """The memories of `tenant_stores`, and an autocommit connection to each one's server."""

    dsn: str
    memories: dict[K, Memory]
    conns: dict[K, psycopg.Connection[Any]]


@contextmanager
def tenant_stores(opened: Mapping[K, Mapping[str, Any]], threads: int) -> Iterator[Stores[K]]:
    """One embedded server holding a store per key of `opened` (its `Memory.open` keywords beside
    the threshold and a pool of `threads` connections), each with a connection of its own that holds
    the vector pool (`load` reads it); all closed at the end."""
    pool = np.random.default_rng(7).normal(size=(POOL, 384)).astype(np.float32)
    pool /= np.linalg.norm(pool, axis=1, keepdims=True)
    with bench_memory(HashEmbedder()) as base:
        dsn, embedder = base.dsn, base.embedder
        memories = {
            key: Memory.open(dsn, embedder, tenant_index_min_facts=THRESHOLD, pool_size=threads, **dict(keywords))
            for key, keywords in opened.items()
        }
        conns = {key: connect(dsn, autocommit=True) for key in opened}
        try:
            for conn in conns.values():
                _pool_table(conn, pool)
            yield Stores(dsn, memories, conns)
        finally:
            for conn in conns.values():
                conn.close()
            for memory in memories.values():
                memory.close()


def _pool_table(conn: psycopg.Connection[Any], pool: np.ndarray) -> None:
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS pool (i int PRIMARY KEY, v vector)")
    with conn.cursor().copy("COPY pool (i, v) FROM STDIN") as copy:
        for i, vector in enumerate(pool):
            copy.write_row((i, "[" + ",".join(f"{x:.5f}" for x in vector) + "]"))


def load(
    conn: psycopg.Connection[Any],
    schema: str,
    first: int,
    last: int,
    facts: int,
    *,
    offset: int = 0,
    partitioned: bool | None = None,
) -> None:
    """Facts `offset`.. `offset + facts` of tenants `first`..`last` (their entity made with the first);
    `partitioned` when the store is (by default, when its schema is named so)."""
    lit: dict[str, sql.Composable] = {
        "first": sql.Literal(first),
        "last": sql.Literal(last),
        "f": sql.Literal(facts),
        "o": sql.Literal(offset),
    }
    lit["names"] = _q(
        "SELECT 'user-' || lpad(g::text, 5, '0') AS d FROM generate_series({first}, {last}) g", schema, **lit
    )
    with conn.transaction():
        if offset == 0:
            conn.execute(
                _q(
                    "INSERT INTO {s}.entities (dataset, project, name, type, embedding)"
                    " SELECT d, {p}, 'user', 'PERSON', (SELECT v FROM pool WHERE i = 0) FROM ({names}) t",
                    schema,
                    p=sql.Literal(PROJECT),
                    **lit,
                )
            )
        conn.execute(
            _q(
                """INSERT INTO {s}.facts (dataset, project, subject, predicate, object, object_type, subject_id,
                                          anchor_id, valid_at, confidence, embedding)
                   SELECT e.dataset, e.project, 'user', 'noted', 'note ' || g || ' of ' || e.dataset, 'LITERAL',
                          e.id, e.id, '-infinity', 1, p.v
                   FROM {s}.entities e CROSS JOIN generate_series({o} + 1, {o} + {f}) g
                   JOIN pool p ON p.i = (hashint8(e.id * 1000 + g) & 2147483647) % {n}
                   WHERE e.dataset IN ({names})""",
                schema,
                n=sql.Literal(POOL),
                **lit,
            )
        )
        conn.execute(
            _q(
                """INSERT INTO {s}.fact_entities (dataset, project, entity_id, fact_id, roles)
                   SELECT dataset, project, subject_id, id, 1 FROM {s}.facts f
                   WHERE f.dataset IN ({names}) AND NOT EXISTS (
                         SELECT 1 FROM {s}.fact_entities x
                         WHERE x.dataset = f.dataset AND x.project = f.project AND x.fact_id = f.id)""",
                schema,
                **lit,
            )
        )
        conn.execute(
            _q(
                """INSERT INTO {s}.scopes (dataset, project, fact_count) SELECT d, {p}, {total} FROM ({names}) t
                   ON CONFLICT (dataset, project) DO UPDATE SET fact_count = EXCLUDED.fact_count""",
                schema,
                p=sql.Literal(PROJECT),
                total=sql.Literal(offset + facts),
                **lit,
            )
        )
    partitioned = schema == "partitioned" if partitioned is None else partitioned
    layout = REGISTRY["partitioned" if partitioned else "plain"]
    for statement in layout.analyze_statements(schema):  # memsoda's own refresh
        conn.execute(statement)


class Probe:
    """A small tenant's read every `every_s`, on its own connection, keeping the slowest."""

    def __init__(self, memory: Memory, scope: Scope, every_s: float = 0.005) -> None:
        self.slowest_ms = 0.0
        self._memory, self._scope, self._every = memory, scope, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            self._memory.recall(None, dataset=self._scope.dataset, project=self._scope.project)
            self.slowest_ms = max(self.slowest_ms, (time.perf_counter() - started) * 1000)
            self._stop.wait(self._every)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def make_large(memory: Memory, conn: psycopg.Connection[Any], scope: Scope) -> float:
    """memsoda's own operation making `scope` large; seconds."""
    info = replace(memory.info, tenant_index_min_facts=THRESHOLD)
    started = time.perf_counter()
    for _ in range(3):  # as the next writes into it would
        if Runner.run_on(conn, ensure_tenant_indexes(info, scope)):
            return time.perf_counter() - started
    raise RuntimeError(f"{scope} was not made large")


def timed_calls(
    memories: dict[str, Memory], large: int, tenants: int, calls: int, rng: random.Random
) -> dict[tuple[str, str], float]:
    """(case, layout) -> p50 ms of memsoda's calls, the layouts alternating call by call."""
    cases: dict[str, tuple[bool, Callable[[Memory, Scope, int], Any]]] = {
        "add_facts(1), small tenant": (False, lambda m, s, n: m.add_facts([_one(n)], **vars(s))),
        "add_facts(1), large tenant": (True, lambda m, s, n: m.add_facts([_one(n)], **vars(s))),
        "recall, small tenant": (False, lambda m, s, n: m.recall(f"note {n % 10}", **vars(s))),
        "recall, large tenant": (True, lambda m, s, n: m.recall(f"note {n % 25}", **vars(s))),
    }
    out: dict[tuple[str, str], float] = {}
    for case, (is_large, call) in cases.items():
        samples: dict[str, list[float]] = {layout: [] for layout in memories}
        for n in range(calls + 10):
            scope = _tenant(rng.randrange(large) if is_large else rng.randrange(large, tenants))
            for layout, memory in memories.items():
                started = time.perf_counter()
                call(memory, scope, n)
                if n >= 10:  # warm-up: plans, caches
                    samples[layout].append((time.perf_counter() - started) * 1000)
        out.update({(case, layout): statistics.median(values) for layout, values in samples.items()})
    return out


def _one(n: int) -> dict[str, str]:
    return {"subject": "user", "predicate": "wrote", "object": f"timed note {n} {random.random():.6f}"}


def concurrent(memory: Memory, tenants: int, seconds: float, threads: int) -> tuple[int, int, list[str]]:
    """`threads` threads of random `add_facts` and `recall` for `seconds`: (writes, recalls, errors)."""
    counts, errors, lock = [0, 0], [], threading.Lock()
    stop = time.monotonic() + seconds

    def work(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop:
            scope, kind = _tenant(rng.randrange(tenants)), rng.randrange(2)
            try:
                if kind == 0:
                    memory.add_facts([_one(rng.randrange(10**6))], **vars(scope))
                else:
                    memory.recall(f"note {rng.randrange(25)}", **vars(scope))
                with lock:
                    counts[kind] += 1
            except Exception as exc:
                with lock:
                    errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")

    pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return counts[0], counts[1], errors


def run(
    *,
    tenants: int = 10_000,
    small_facts: int = 10,
    large_facts: int = 25,
    steps: Sequence[int] = (10, 100, 1_000),
    plain_max: int = 100,
    calls: int = 200,
    seconds: float = 60.0,
    threads: int = 16,
) -> str:
    """The markdown of `python -m bench layout`."""
    rng = random.Random(19)
    lines = [
        f"## Tenant layouts: {tenants:,} tenants of {small_facts} facts, the large ones of {large_facts}\n",
        environment(),
        "",
    ]
    with tenant_stores({layout: {"schema": layout, "layout": layout} for layout in LAYOUTS}, threads) as stores:
        memories, conns = stores.memories, stores.conns
        for layout, conn in conns.items():
            started = time.perf_counter()
            load(conn, layout, 0, tenants - 1, small_facts)
            lines.append(f"- loaded {layout}: {time.perf_counter() - started:.1f} s")
        made = dict.fromkeys(LAYOUTS, 0)
        builds: list[list[Any]] = []
        rows: list[list[Any]] = []
        for step in steps:
            active = {layout: memories[layout] for layout in LAYOUTS if layout != "plain" or step <= plain_max}
            for layout in active:
                conn = conns[layout]
                load(conn, layout, made[layout], step - 1, large_facts - small_facts, offset=small_facts)
                seconds_each: list[float] = []
                slowest: list[float] = []
                while made[layout] < step:
                    scope = _tenant(made[layout])
                    if step - made[layout] <= 5:
                        with Probe(memories[layout], _tenant(tenants - 1)) as probe:
                            seconds_each.append(make_large(memories[layout], conn, scope))
                        slowest.append(probe.slowest_ms)
                    else:
                        make_large(memories[layout], conn, scope)
                    made[layout] += 1
                builds.append([layout, step, f"{statistics.mean(seconds_each) * 1000:.0f}", f"{max(slowest):.0f}"])
            for (case, layout), ms in timed_calls(active, step, tenants, calls, rng).items():
                rows.append([step, case, layout, f"{ms:.2f}"])
        lines.append("\nMaking one more tenant large (memsoda's operation; mean of the last 5 at each step):\n")
        lines.append(
            markdown_table(
                ["layout", "large tenants", "ms per tenant", "slowest small-tenant read meanwhile, ms"], builds
            )
        )
        lines.append("\nmemsoda's calls, p50 ms, the layouts alternating call by call:\n")
        lines.append(markdown_table(["large tenants", "call", "layout", "p50 ms"], rows))
        writes, recalls, errors = concurrent(memories["partitioned"], tenants, seconds, threads)
        lines.append(
            f"\nConcurrency, partitioned, {made['partitioned']} large tenants:"
            f" {threads} threads for {seconds:.0f} s, {writes} add_facts and {recalls} recalls,"
            f" {len(errors)} errors {sorted(set(errors))[:3]}"
        )
    return "\n".join(lines) + "\n"
