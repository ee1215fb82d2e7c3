"""`python -m bench index`: which vector index a large tenant should have, writes against search.

Every write into a tenant with its own HNSW index pays HNSW insertion, row by row (bench/RESULTS.md,
section 3). This bench isolates that cost: a bare table holding nothing but the vectors, one index
variant at a time, so the only difference between rows is the index.

- Vectors: the real embedder's (all-MiniLM-L6-v2 by default) for fact texts recombined from the
  labelled memories' subjects, predicates and objects (`fact_texts`): real words, real embedding
  structure, as many facts as asked. Uniform random unit vectors, the speed bench's, have no
  structure and would flatter no index.
- Queries: the labelled sets' 208 questions, embedded by the same model.
- Per variant: the build over `facts` rows; then `extra` more rows written in batches of 100 with
  the index in place (binary COPY, so the client costs little); then kNN-50 p50 latency, recall@50
  against the exact top 50, and recall@8 of its first 8 against the exact top 8 (`recall_within`).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from bench import labelled
from bench.common import bench_memory, connect, environment, markdown_table
from memsoda_core.embedders import Embedder

TABLE = "bench_vector_index"
WRITE_BATCH = 100
NEIGHBOURS = 50
TOP = 8


@dataclass(frozen=True)
class Variant:
    """One index (or none) and the search settings it is read with."""

    label: str
    index: str | None
    """`USING ...` clause of CREATE INDEX on (embedding), or None for an exact scan."""
    settings: tuple[tuple[str, str], ...] = ()
    """(name, value) pairs, set for the session before searching."""


def variants(rows: int) -> list[Variant]:
    """HNSW at memsoda's settings and lighter graphs; IVFFlat at pgvector's two list-count rules
    (rows / 1000, and sqrt(rows)) with a sweep of probes; the exact scan."""
    by_rows = max(rows // 1000, 4)
    by_sqrt = max(int(rows**0.5), 4)
    hnsw = "USING hnsw (embedding vector_cosine_ops)"
    return [
        Variant("no index: exact scan", None),
        Variant("HNSW m 16, ef_construction 64 (memsoda), ef_search 100", hnsw, (("hnsw.ef_search", "100"),)),
        Variant("HNSW m 16, ef_construction 64 (memsoda), ef_search 40", hnsw, (("hnsw.ef_search", "40"),)),
        Variant(
            "HNSW m 16, ef_construction 32, ef_search 100",
            f"{hnsw} WITH (m = 16, ef_construction = 32)",
            (("hnsw.ef_search", "100"),),
        ),
        Variant(
            "HNSW m 8, ef_construction 32, ef_search 100",
            f"{hnsw} WITH (m = 8, ef_construction = 32)",
            (("hnsw.ef_search", "100"),),
        ),
        *(
            Variant(
                f"IVFFlat lists {lists}, probes {probes}",
                f"USING ivfflat (embedding vector_cosine_ops) WITH (lists = {lists})",
                (("ivfflat.probes", str(probes)),),
            )
            for lists, sweep in ((by_rows, (2, 4, 8, 16)), (by_sqrt, (8, 16, 32)))
            for probes in sweep
        ),
    ]


def fact_texts(count: int, seed: int) -> list[str]:
    """`count` distinct "subject predicate object" texts from the labelled memories' own parts."""
    facts = [fact for name in ("persona", "chat") for fact in labelled.load(name).facts]
    subjects = sorted({f["subject"] for f in facts} | {f["object"] for f in facts})
    predicates = sorted({f["predicate"] for f in facts})
    objects = sorted({f["object"] for f in facts})
    limit = len(subjects) * len(predicates) * len(objects)
    if count > limit:
        raise ValueError(f"at most {limit} distinct texts")
    rng = random.Random(seed)
    texts: dict[str, None] = {}
    while len(texts) < count:
        texts.setdefault(f"{rng.choice(subjects)} {rng.choice(predicates)} {rng.choice(objects)}", None)
    return list(texts)


def cosine_scores(vectors: np.ndarray[Any, Any], queries: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Cosine similarity of every query (rows) to every vector (columns, row id - 1), in float64."""
    unit = vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    return np.asarray(queries, dtype=np.float64) @ unit.T


TIE = 1e-6
"""Scores this close count as equal: pgvector computes in float32, and embeddings of texts made of
the same words can tie."""


def recall_within(found: Sequence[int], scores: np.ndarray[Any, Any], k: int) -> float:
    """Share of the exact top `k` that the first `k` of `found` (row ids) match, where a row counts
    if it is at least as close as the k-th nearest (so any of tied rows is right)."""
    kth = -np.partition(-scores, k - 1)[k - 1]
    return sum(1 for row in found[:k] if scores[row - 1] >= kth - TIE) / k


def _copy(conn: psycopg.Connection[Any], vectors: np.ndarray[Any, Any]) -> None:
    statement = sql.SQL("COPY {} (embedding) FROM STDIN WITH (FORMAT BINARY)").format(sql.Identifier(TABLE))
    with conn.cursor().copy(statement) as copy:
        copy.set_types(["vector"])
        for vector in vectors:
            copy.write_row([vector])


def _measure(
    conn: psycopg.Connection[Any],
    variant: Variant,
    base: np.ndarray[Any, Any],
    extra: np.ndarray[Any, Any],
    queries: np.ndarray[Any, Any],
    scores: np.ndarray[Any, Any],
) -> list[Any]:
    table = sql.Identifier(TABLE)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    conn.execute(
        sql.SQL("CREATE TABLE {} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, embedding vector({}))").format(
            table, sql.Literal(base.shape[1])
        )
    )
    _copy(conn, base)
    started = time.perf_counter()
    if variant.index:
        conn.execute(sql.SQL("CREATE INDEX ON {} {}").format(table, sql.SQL(variant.index)))
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    for at in range(0, len(extra), WRITE_BATCH):
        with conn.transaction():
            _copy(conn, extra[at : at + WRITE_BATCH])
    write_rate = len(extra) / (time.perf_counter() - started)
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
    for name, value in variant.settings:
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))
    search = sql.SQL("SELECT id FROM {} ORDER BY embedding <=> %s LIMIT {}").format(table, sql.Literal(NEIGHBOURS))
    latencies, recalls, tops = [], [], []
    for query, row_scores in zip(queries, scores, strict=True):
        started = time.perf_counter()
        found = [row[0] for row in conn.execute(search, (query,)).fetchall()]
        latencies.append((time.perf_counter() - started) * 1000)
        recalls.append(recall_within(found, row_scores, NEIGHBOURS))
        tops.append(recall_within(found, row_scores, TOP))
    return [
        variant.label,
        round(build_s, 2) if variant.index else "-",
        round(write_rate),
        statistics.median(latencies),
        statistics.fmean(recalls),
        statistics.fmean(tops),
    ]


def run(
    *, embedder: Embedder, facts: int = 20_000, extra: int = 2_000, queries: int | None = None, seed: int = 5
) -> str:
    """The vector-index benchmark; returns markdown."""
    texts = fact_texts(facts + extra, seed)
    questions = [q.text for name in ("persona", "chat") for q in labelled.load(name).queries][:queries]
    started = time.perf_counter()
    vectors = np.asarray(embedder.embed_documents(texts), dtype=np.float32)
    embed_s = time.perf_counter() - started
    query_vectors = np.asarray([embedder.embed_query(q) for q in questions], dtype=np.float32)
    scores = cosine_scores(vectors, query_vectors)
    rows = []
    with bench_memory(embedder) as memory, connect(memory.dsn) as conn:
        env = environment(memory.dsn)
        conn.execute("SET maintenance_work_mem = '1GB'")  # as memsoda builds its tenant indexes
        conn.execute("SET ivfflat.iterative_scan = relaxed_order")  # memsoda sets hnsw's already
        try:
            for variant in variants(facts + extra):
                rows.append(_measure(conn, variant, vectors[:facts], vectors[facts:], query_vectors, scores))
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(TABLE)))
    header = [
        "index",
        "build s",
        f"writes/s (batches of {WRITE_BATCH})",
        f"kNN-{NEIGHBOURS} p50 ms",
        f"recall@{NEIGHBOURS}",
        f"recall@{TOP}",
    ]
    return (
        f"## Vector index: writes against search ({facts:,} vectors, then {extra:,} written)\n\n"
        f"Run: {env}.\n\n"
        f"Vectors: {embedder.model} ({embedder.dimensions} dims) of {facts + extra:,} fact texts recombined "
        f"from the labelled memories (embedded in {embed_s:.0f} s); {len(questions)} labelled questions as "
        "queries. A bare table per row: the vectors and the index, nothing else.\n\n"
        f"{markdown_table(header, rows)}\n"
    )
