"""`python -m bench layout`: two tenant layouts side by side, on the same synthetic store (issue 19).

- **partial** (today's): one table per kind for every tenant; a large tenant gets partial HNSW and
  GIN indexes `WHERE dataset = ... AND project = ...` on the shared tables (`store.tenant_index`).
- **partitioned** (the candidate): `entities`, `facts`, `fact_entities` and `fact_sources` become
  LIST-partitioned by dataset; the tables memsoda has today become the DEFAULT partitions, where
  every small tenant stays; a large tenant moves, in one transaction, to partitions of its own
  (dataset, then project: the leaf is that tenant alone), with ordinary indexes and leaf-to-leaf
  foreign keys. The conversion and the move here are the prototype of the migration, in SQL.

Both start from memsoda's own schema (`Memory.open`), hold the same rows (random unit vectors from
a pool, one entity per tenant) and are measured in one run, call by call alternating. What is
timed is the storage's share of memsoda's work, with statements shaped like memsoda's: a one-fact
write (fact + its entity link, one transaction, planned afresh), a tenant's kNN (prepared: a
large tenant's statement names it as literals, a small tenant's binds it), and what it costs to
make one more tenant large.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from bench.common import bench_memory, connect, environment, markdown_table
from bench.hashembed import HashEmbedder
from memsoda_core.store.tenant_index import create_statement, tenant_indexes, tenant_key
from memsoda_core.validation import Scope

PARTITIONED = ("entities", "facts", "fact_entities", "fact_sources")
"""The tables a tenant's partitions cover: those its foreign keys join (a leaf points to a leaf)."""
IDENTITY = {"entities", "facts", "fact_sources"}
FOREIGN_KEYS = (  # (table, columns, referenced table): memsoda's foreign keys, leaf to leaf
    ("facts", "subject_id", "entities"),
    ("facts", "anchor_id", "entities"),
    ("fact_entities", "fact_id", "facts"),
    ("fact_entities", "entity_id", "entities"),
    ("fact_sources", "fact_id", "facts"),
)
PROJECT = "proj"
POOL = 2_000


def _tenant(n: int) -> Scope:
    return Scope(dataset=f"user-{n:05d}", project=PROJECT)


def _q(template: str, **parts: Any) -> sql.Composed:
    return sql.SQL(template).format(**parts)


# --- the partitioned layout (prototype of the migration, SQL) ----------------------------------------------


def convert_statements(schema: str) -> list[sql.Composed]:
    """Today's tables become the DEFAULT partitions of new LIST (dataset) parents: no row moves.
    Identity moves to the parent (a partition may not have one), continuing the old sequence."""
    s = sql.Identifier(schema)
    out: list[sql.Composed] = []
    for table in PARTITIONED:
        t, shared = sql.Identifier(table), sql.Identifier(f"{table}_shared")
        out.append(_q("ALTER TABLE {s}.{t} RENAME TO {shared}", s=s, t=t, shared=shared))
        out.append(
            _q(
                "CREATE TABLE {s}.{t} (LIKE {s}.{shared} INCLUDING DEFAULTS INCLUDING GENERATED"
                " INCLUDING CONSTRAINTS INCLUDING IDENTITY) PARTITION BY LIST (dataset)",
                s=s,
                t=t,
                shared=shared,
            )
        )
        if table in IDENTITY:
            old = sql.Literal(f"{schema}.{table}_shared")
            new = sql.Literal(f"{schema}.{table}")
            out.append(
                _q(
                    "SELECT setval(pg_get_serial_sequence({new}, 'id'),"
                    " greatest(coalesce(pg_sequence_last_value(pg_get_serial_sequence({old}, 'id')::regclass), 0),"
                    " (SELECT coalesce(max(id), 0) FROM {s}.{shared}), 1))",
                    s=s,
                    shared=shared,
                    old=old,
                    new=new,
                )
            )
            out.append(_q("ALTER TABLE {s}.{shared} ALTER COLUMN id DROP IDENTITY", s=s, shared=shared))
        keys = {
            "entities": ["(dataset, project, id)", "UNIQUE (dataset, project, name)"],
            "facts": ["(dataset, project, id)"],
            "fact_entities": ["(dataset, project, entity_id, fact_id)"],
            "fact_sources": ["(dataset, project, fact_id, id)"],
        }[table]
        out.append(_q("ALTER TABLE {s}.{t} ADD PRIMARY KEY " + keys[0], s=s, t=t))
        for extra in keys[1:]:
            out.append(_q("ALTER TABLE {s}.{t} ADD " + extra, s=s, t=t))
        out.append(_q("ALTER TABLE {s}.{t} ATTACH PARTITION {s}.{shared} DEFAULT", s=s, t=t, shared=shared))
    return out


def _names(table: str, scope: Scope) -> tuple[sql.Identifier, sql.Identifier, sql.Identifier]:
    """(the dataset's partition, the tenant's leaf, the dataset's other projects)."""
    dkey = tenant_key(Scope(dataset=scope.dataset, project=""))
    return (
        sql.Identifier(f"{table}_d{dkey}"),
        sql.Identifier(f"{table}_t{tenant_key(scope)}"),
        sql.Identifier(f"{table}_d{dkey}_rest"),
    )


def _columns(conn: psycopg.Connection[Any], schema: str, table: str) -> sql.Composed:
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = format('%%I.%%I', %s::text, %s::text)::regclass"
        " AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
        (schema, f"{table}_shared"),
    ).fetchall()
    return sql.SQL(", ").join(sql.Identifier(name) for (name,) in rows)


def move_tenant(conn: psycopg.Connection[Any], schema: str, scope: Scope) -> dict[str, float]:
    """Move `scope` (its dataset not yet partitioned) out of the DEFAULT partitions, in one
    transaction; then build its leaf's HNSW and GIN indexes concurrently. Returns seconds per step,
    `exclusive` being the window the DEFAULT partitions are locked ACCESS EXCLUSIVE (the attach,
    which checks that they hold none of the dataset's rows, to the commit)."""
    s = sql.Identifier(schema)
    lit = {"d": sql.Literal(scope.dataset), "p": sql.Literal(scope.project)}
    columns = {table: _columns(conn, schema, table) for table in PARTITIONED}
    times: dict[str, float] = {}
    start = time.perf_counter()
    with conn.transaction():
        for table in PARTITIONED:
            parent, leaf, rest = _names(table, scope)
            like = _q(
                "(LIKE {s}.{t} INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)",
                s=s,
                t=sql.Identifier(table),
            )
            conn.execute(
                _q("CREATE TABLE {s}.{parent} {like} PARTITION BY LIST (project)", s=s, parent=parent, like=like)
            )
            conn.execute(
                _q(
                    "CREATE TABLE {s}.{leaf} PARTITION OF {s}.{parent} FOR VALUES IN ({p})",
                    s=s,
                    leaf=leaf,
                    parent=parent,
                    **lit,
                )
            )
            conn.execute(_q("CREATE TABLE {s}.{rest} PARTITION OF {s}.{parent} DEFAULT", s=s, rest=rest, parent=parent))
            conn.execute(
                _q(
                    "INSERT INTO {s}.{parent} ({cols}) SELECT {cols} FROM {s}.{shared} WHERE dataset = {d}",
                    s=s,
                    parent=parent,
                    cols=columns[table],
                    shared=sql.Identifier(f"{table}_shared"),
                    **lit,
                )
            )
        for table in reversed(PARTITIONED):  # the referencing rows first
            conn.execute(
                _q("DELETE FROM {s}.{shared} WHERE dataset = {d}", s=s, shared=sql.Identifier(f"{table}_shared"), **lit)
            )
        times["copy"] = time.perf_counter() - start
        mark = time.perf_counter()
        for table in PARTITIONED:
            parent, _, _ = _names(table, scope)
            conn.execute(
                _q(
                    "ALTER TABLE {s}.{t} ATTACH PARTITION {s}.{parent} FOR VALUES IN ({d})",
                    s=s,
                    t=sql.Identifier(table),
                    parent=parent,
                    **lit,
                )
            )
        for table, column, referenced in FOREIGN_KEYS:
            for pick in (1, 2):
                child, target = _names(table, scope)[pick], _names(referenced, scope)[pick]
                conn.execute(
                    _q(
                        "ALTER TABLE {s}.{child} ADD FOREIGN KEY (dataset, project, {column})"
                        " REFERENCES {s}.{target} (dataset, project, id)"
                        + (" ON DELETE CASCADE" if table != "facts" else ""),
                        s=s,
                        child=child,
                        target=target,
                        column=sql.Identifier(column),
                    )
                )
    times["exclusive"] = time.perf_counter() - mark
    mark = time.perf_counter()
    facts_leaf, entities_leaf = _names("facts", scope)[1], _names("entities", scope)[1]
    for statement in (
        _q("CREATE INDEX CONCURRENTLY ON {s}.{leaf} USING hnsw (embedding vector_cosine_ops)", s=s, leaf=facts_leaf),
        _q("CREATE INDEX CONCURRENTLY ON {s}.{leaf} USING gin (tsv)", s=s, leaf=facts_leaf),
        _q("CREATE INDEX CONCURRENTLY ON {s}.{leaf} USING hnsw (embedding vector_cosine_ops)", s=s, leaf=entities_leaf),
    ):
        conn.execute(statement)
    times["indexes"] = time.perf_counter() - mark
    times["total"] = time.perf_counter() - start
    return times


def build_partial_indexes(conn: psycopg.Connection[Any], schema: str, scope: Scope) -> dict[str, float]:
    """Today's way: the scope's three partial indexes, built concurrently (memsoda's own DDL)."""
    start = time.perf_counter()
    for index in tenant_indexes(scope):
        conn.execute(create_statement(schema, scope, index))
    seconds = time.perf_counter() - start
    return {"indexes": seconds, "total": seconds}


# --- data -----------------------------------------------------------------------------------------------------


def load(conn: psycopg.Connection[Any], schema: str, tenants: int, facts: int, pool: np.ndarray) -> None:
    """`tenants` scopes of `facts` facts each, one entity per tenant, vectors from `pool`."""
    s = sql.Identifier(schema)
    with conn.transaction():
        conn.execute(_q("CREATE TEMP TABLE pool (i int PRIMARY KEY, v vector)", s=s))
        with conn.cursor().copy("COPY pool (i, v) FROM STDIN") as copy:
            for i, vector in enumerate(pool):
                copy.write_row((i, "[" + ",".join(f"{x:.5f}" for x in vector) + "]"))
        names = _q(
            "SELECT 'user-' || lpad(g::text, 5, '0') AS d FROM generate_series(0, {n}) g", n=sql.Literal(tenants - 1)
        )
        conn.execute(
            _q(
                "INSERT INTO {s}.scopes (dataset, project, fact_count) SELECT d, {p}, {f} FROM ({names}) t",
                s=s,
                names=names,
                p=sql.Literal(PROJECT),
                f=sql.Literal(facts),
            )
        )
        conn.execute(
            _q(
                "INSERT INTO {s}.entities (dataset, project, name, type, fact_count, embedding)"
                " SELECT d, {p}, 'user', 'PERSON', {f}, (SELECT v FROM pool WHERE i = 0) FROM ({names}) t",
                s=s,
                names=names,
                p=sql.Literal(PROJECT),
                f=sql.Literal(facts),
            )
        )
        conn.execute(
            _q(
                """INSERT INTO {s}.facts (dataset, project, subject, predicate, object, object_type, subject_id,
                                          anchor_id, valid_at, confidence, embedding)
                   SELECT e.dataset, e.project, 'user', 'noted', 'note ' || g || ' of ' || e.dataset, 'LITERAL',
                          e.id, e.id, '-infinity', 1, p.v
                   FROM {s}.entities e CROSS JOIN generate_series(1, {f}) g
                   JOIN pool p ON p.i = (hashint8(e.id * 1000 + g) & 2147483647) % {pool}""",
                s=s,
                f=sql.Literal(facts),
                pool=sql.Literal(len(pool)),
            )
        )
        conn.execute(
            _q(
                "INSERT INTO {s}.fact_entities (dataset, project, entity_id, fact_id, roles)"
                " SELECT dataset, project, subject_id, id, 1 FROM {s}.facts",
                s=s,
            )
        )
        conn.execute("DROP TABLE pool")
    conn.execute(_q("ANALYZE {s}.scopes, {s}.entities, {s}.facts, {s}.fact_entities", s=s))


# --- what is timed ----------------------------------------------------------------------------------------------


def write_statements(schema: str) -> tuple[sql.Composed, sql.Composed]:
    s = sql.Identifier(schema)
    fact = _q(
        """INSERT INTO {s}.facts (dataset, project, subject, predicate, object, object_type, subject_id,
                                  anchor_id, valid_at, confidence, embedding)
           SELECT %(dataset)s, %(project)s, 'user', 'noted', %(text)s, 'LITERAL', e.id, e.id, now(), 1, %(v)s
           FROM {s}.entities e WHERE e.dataset = %(dataset)s AND e.project = %(project)s AND e.name = 'user'
           RETURNING id, subject_id""",
        s=s,
    )
    link = _q(
        "INSERT INTO {s}.fact_entities (dataset, project, entity_id, fact_id, roles)"
        " VALUES (%(dataset)s, %(project)s, %(entity)s, %(fact)s, 1)",
        s=s,
    )
    return fact, link


def write_once(conn: psycopg.Connection[Any], schema: str, scope: Scope, vector: np.ndarray) -> tuple[float, int]:
    """One fact and its link in one transaction: (ms, locks held before the commit)."""
    fact, link = write_statements(schema)
    start = time.perf_counter()
    with conn.transaction():
        params = {"dataset": scope.dataset, "project": scope.project, "text": f"w{random.random()}", "v": vector}
        fact_id, entity = conn.execute(fact, params).fetchone() or (0, 0)
        conn.execute(link, {**params, "entity": entity, "fact": fact_id})
        (locks,) = conn.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()").fetchone() or (0,)
    return (time.perf_counter() - start) * 1000, int(locks)


def knn_statement(schema: str, table: str, scope: Scope | None) -> sql.Composed:
    """A tenant's 8 nearest facts: the tenant as literals (`scope`) or bound."""
    tenant = (
        _q("f.dataset = {d} AND f.project = {p}", d=sql.Literal(scope.dataset), p=sql.Literal(scope.project))
        if scope
        else sql.SQL("f.dataset = %(dataset)s AND f.project = %(project)s")
    )
    return _q(
        "SELECT f.id FROM {s}.{t} f WHERE {tenant} AND f.invalid_at IS NULL ORDER BY f.embedding <=> %(v)s LIMIT 8",
        s=sql.Identifier(schema),
        t=sql.Identifier(table),
        tenant=tenant,
    )


def knn_once(
    conn: psycopg.Connection[Any], statement: sql.Composed, scope: Scope, vector: np.ndarray
) -> tuple[float, int]:
    start = time.perf_counter()
    with conn.transaction():
        conn.execute(
            statement, {"dataset": scope.dataset, "project": scope.project, "v": vector}, prepare=True
        ).fetchall()
        (locks,) = conn.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()").fetchone() or (0,)
    return (time.perf_counter() - start) * 1000, int(locks)


def _p50(samples: Sequence[tuple[float, int]]) -> tuple[float, int]:
    return statistics.median(ms for ms, _ in samples), max(locks for _, locks in samples)


def measure(
    conns: dict[str, psycopg.Connection[Any]], large: int, tenants: int, calls: int, pool: np.ndarray
) -> dict[str, dict[str, tuple[float, int]]]:
    """Per layout: write and kNN p50 (ms) and the most locks held, small and large tenants, the
    layouts alternating call by call."""
    rng = random.Random(large)
    cases: dict[str, Callable[[str, Scope, np.ndarray], tuple[float, int]]] = {
        "write, small tenant": lambda layout, scope, v: write_once(conns[layout], layout, scope, v),
        "write, large tenant": lambda layout, scope, v: write_once(conns[layout], layout, scope, v),
        "kNN, small tenant": lambda layout, scope, v: knn_once(
            conns[layout], knn_statement(layout, "facts_shared" if layout == "partitioned" else "facts", None), scope, v
        ),
        "kNN, large tenant": lambda layout, scope, v: knn_once(
            conns[layout], knn_statement(layout, "facts", scope), scope, v
        ),
        "kNN, small tenant, bound, on the parent": lambda layout, scope, v: knn_once(
            conns[layout], knn_statement(layout, "facts", None), scope, v
        ),
    }
    out: dict[str, dict[str, tuple[float, int]]] = {}
    for case, call in cases.items():
        samples: dict[str, list[tuple[float, int]]] = {layout: [] for layout in conns}
        for n in range(calls + 10):
            pick = rng.randrange(large) if "large" in case else rng.randrange(large, tenants)
            scope, vector = _tenant(pick), pool[rng.randrange(len(pool))]
            for layout in conns:
                result = call(layout, scope, vector)
                if n >= 10:  # warm-up: prepared plans, caches
                    samples[layout].append(result)
        out[case] = {layout: _p50(values) for layout, values in samples.items()}
    return out


def concurrent(
    dsn: str, schema: str, tenants: int, large: int, seconds: float, threads: int, pool: np.ndarray
) -> tuple[int, int, list[str]]:
    """`threads` sessions writing and recalling random tenants for `seconds`: (writes, kNNs, errors)."""
    counts = [0, 0]
    errors: list[str] = []
    stop = time.monotonic() + seconds
    lock = threading.Lock()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        with connect(dsn, autocommit=True) as conn:
            while time.monotonic() < stop:
                pick = rng.randrange(tenants)
                scope, vector = _tenant(pick), pool[rng.randrange(len(pool))]
                try:
                    if rng.random() < 0.5:
                        write_once(conn, schema, scope, vector)
                        kind = 0
                    else:
                        table = "facts" if pick < large or schema != "partitioned" else "facts_shared"
                        knn_once(conn, knn_statement(schema, table, scope if pick < large else None), scope, vector)
                        kind = 1
                    with lock:
                        counts[kind] += 1
                except psycopg.Error as exc:
                    with lock:
                        errors.append(str(exc).splitlines()[0])

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return counts[0], counts[1], errors


def run(
    *,
    tenants: int = 10_000,
    facts: int = 25,
    steps: Sequence[int] = (10, 100, 1_000),
    partial_max: int = 100,
    calls: int = 200,
    seconds: float = 60.0,
    threads: int = 16,
) -> str:
    """The markdown of `python -m bench layout`."""
    pool = np.random.default_rng(7).normal(size=(POOL, 384)).astype(np.float32)
    pool /= np.linalg.norm(pool, axis=1, keepdims=True)
    lines = [
        f"## Tenant layouts: {tenants:,} tenants of {facts} facts, large ones {', '.join(map(str, steps))}\n",
        environment(),
        "",
    ]
    with bench_memory(HashEmbedder()) as memory:
        dsn = memory.dsn
        from memsoda_core import Memory

        for layout in ("partial", "partitioned"):
            Memory.open(dsn, memory.embedder, schema=layout).close()
        conns = {layout: connect(dsn, autocommit=True) for layout in ("partial", "partitioned")}
        for layout, conn in conns.items():
            started = time.perf_counter()
            load(conn, layout, tenants, facts, pool)
            lines.append(f"- loaded {layout}: {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        with conns["partitioned"].transaction():
            for statement in convert_statements("partitioned"):
                conns["partitioned"].execute(statement)
        lines.append(f"- converted to partitions (no row moved): {time.perf_counter() - started:.2f} s\n")
        made = {"partial": 0, "partitioned": 0}
        rows: list[list[Any]] = []
        builds: list[list[Any]] = []
        for step in steps:
            for layout, conn in conns.items():
                if layout == "partial" and step > partial_max:
                    continue
                seconds_each: list[dict[str, float]] = []
                while made[layout] < step:
                    scope = _tenant(made[layout])
                    make = move_tenant if layout == "partitioned" else build_partial_indexes
                    seconds_each.append(make(conn, layout, scope))
                    made[layout] += 1
                conn.execute(sql.SQL("ANALYZE {}.facts").format(sql.Identifier(layout)))
                last = seconds_each[-5:]
                builds.append(
                    [
                        layout,
                        step,
                        *(
                            f"{statistics.mean(t.get(key, 0.0) for t in last) * 1000:.0f}"
                            for key in ("copy", "exclusive", "indexes", "total")
                        ),
                    ]
                )
            active = {layout: conn for layout, conn in conns.items() if made[layout] == step}
            for case, per_layout in measure(active, step, tenants, calls, pool).items():
                for layout, (ms, locks) in per_layout.items():
                    rows.append([step, case, layout, f"{ms:.3f}", locks])
        lines.append("One more large tenant (ms, mean of the last 5 made at each step):\n")
        lines.append(markdown_table(["layout", "large tenants", "copy", "DEFAULT locked", "indexes", "total"], builds))
        lines.append("\nStatements (p50 ms and the most locks one transaction held):\n")
        lines.append(markdown_table(["large tenants", "statement", "layout", "p50 ms", "locks"], rows))
        writes, knns, errors = concurrent(dsn, "partitioned", tenants, made["partitioned"], seconds, threads, pool)
        lines.append(
            f"\nConcurrency, partitioned, {made['partitioned']} large: {threads} sessions for {seconds:.0f} s, "
            f"{writes} writes and {knns} kNN, {len(errors)} errors {sorted(set(errors))[:3]}"
        )
        for conn in conns.values():
            conn.close()
    return "\n".join(lines) + "\n"
