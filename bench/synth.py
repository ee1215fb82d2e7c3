"""Synthetic memories for speed runs, loaded straight into memsoda's tables with COPY.

Shape: many tenants (dataset "synth", one project each) in one set of tables: `small` tenants of
`small_facts` facts plus the large tenants. Per tenant: entities named from a pseudo-word
vocabulary, one hub ("user", the subject of half the facts) and a Zipf tail, ~10% of facts with a
mention, ~20% invalidated, confidence spread over 0.1-1.0 (about 10% under the 0.5 floor).
Vectors are random, not model output: each entity gets a random unit centre and each fact a unit
vector around its anchor's centre (cosine ~0.7), so HNSW sees clusters rather than pure noise.
Queries are built from a live fact of the tenant: two of its words, a random word, sometimes an
entity's name, and a vector near the fact's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from memsoda_core.store.lexemes import recount_lexemes

DATASET = "synth"
NOW = datetime(2026, 6, 1, tzinfo=UTC)
_START = datetime(2018, 1, 1, tzinfo=UTC)
_SYLLABLES = [a + b for a in "bcdfghjklmnprstvwz" for b in ("a", "e", "i", "o", "u", "ar", "en", "il", "on", "us")]
PREDICATES = (
    "likes",
    "owns",
    "visited",
    "works with",
    "lives near",
    "bought",
    "reads",
    "plays",
    "is friends with",
    "recommended",
    "dislikes",
    "talked about",
    "is planning",
    "uses",
    "subscribes to",
    "met",
    "cooked",
    "watched",
    "listens to",
    "drives",
    "wants",
    "studied",
    "built",
    "repaired",
    "sold",
    "booked",
    "cancelled",
    "joined",
    "left",
    "prefers",
    "avoids",
    "collects",
    "borrowed",
    "lent",
    "called",
    "emailed",
    "follows",
    "invested in",
    "volunteers at",
    "trains at",
)


@dataclass(frozen=True, kw_only=True)
class Tenant:
    project: str
    facts: int


@dataclass(frozen=True, kw_only=True)
class SynthQuery:
    project: str
    text: str
    vector: np.ndarray[Any, np.dtype[np.float32]]
    """For SQL parameters (pgvector's numpy adapter)."""
    values: tuple[float, ...]
    """The same vector as plain floats, for `Memory.recall(query_embedding=...)`."""


def vocabulary(size: int, rng: random.Random) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < size:
        words.setdefault("".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((2, 2, 3, 3, 4)))), None)
    return list(words)


def _zipf(rng: random.Random, n: int, s: float = 1.1) -> int:
    """An index in [0, n) with a Zipf-like skew (small indexes common)."""
    return min(n - 1, int(n ** rng.random() ** s) - 1) if n > 1 else 0


def _unit(rows: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float32]]:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    return (rows / np.where(norms == 0, 1, norms)).astype(np.float32)


@dataclass
class TenantData:
    project: str
    entity_names: list[str]
    entity_types: list[str]
    entity_counts: list[int]
    centres: np.ndarray[Any, np.dtype[np.float32]]
    facts: list[tuple[Any, ...]]
    """(subject_idx, predicate, object text, object_idx | None, mention_idx | None, anchor_idx, valid_at,
    invalid_at, confidence)"""
    vectors: np.ndarray[Any, np.dtype[np.float32]]
    dataset: str = DATASET
    """Its tenant's dataset (the Citus distribution key; the speed runs share one)."""


def generate(tenant: Tenant, *, dims: int, words: Sequence[str], seed: int) -> TenantData:
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    n_entities = max(12, tenant.facts // 8)
    names: dict[str, None] = {"user": None}
    while len(names) < n_entities:
        names.setdefault(" ".join(words[_zipf(rng, len(words))] for _ in range(rng.choice((1, 2, 2, 3)))), None)
    entity_names = list(names)
    types = ["PERSON"] + [rng.choice(("PERSON", "PLACE", "PRODUCT", "ORG", "OTHER")) for _ in entity_names[1:]]
    centres = _unit(nprng.standard_normal((n_entities, dims)))
    counts = [0] * n_entities
    facts: list[tuple[Any, ...]] = []
    anchors = np.empty(tenant.facts, dtype=np.int64)
    span = (NOW - _START).total_seconds()
    for i in range(tenant.facts):
        subject = 0 if rng.random() < 0.5 else 1 + _zipf(rng, n_entities - 1)
        obj_idx: int | None
        if rng.random() < 0.7:
            obj_idx = 1 + _zipf(rng, n_entities - 1)
            obj_idx = obj_idx if obj_idx != subject else None
        else:
            obj_idx = None
        if obj_idx is None:
            parts = [words[_zipf(rng, len(words))] for _ in range(rng.randint(2, 4))]
            if rng.random() < 0.2:
                parts.append(str(rng.randint(2, 99999)))
            obj_text = " ".join(parts)
        else:
            obj_text = entity_names[obj_idx]
        mention = 1 + _zipf(rng, n_entities - 1) if rng.random() < 0.1 else None
        if mention in (subject, obj_idx):
            mention = None
        anchor = obj_idx if obj_idx is not None else subject
        valid_at = _START + timedelta(seconds=rng.random() * span * 0.97)
        invalid_at = None
        if rng.random() < 0.2:
            invalid_at = min(NOW - timedelta(days=1), valid_at + timedelta(days=rng.randint(1, 600)))
            if invalid_at <= valid_at:
                invalid_at = None
        confidence = round(rng.choice((0.1, 0.3, 0.45)) if rng.random() < 0.1 else rng.uniform(0.5, 1.0), 3)
        touched = {subject, *(x for x in (obj_idx, mention) if x is not None)}
        for entity in touched:
            counts[entity] += 1
        anchors[i] = anchor
        facts.append(
            (subject, rng.choice(PREDICATES), obj_text, obj_idx, mention, anchor, valid_at, invalid_at, confidence)
        )
    noise = nprng.standard_normal((tenant.facts, dims)).astype(np.float32) / np.sqrt(dims)
    vectors = _unit(centres[anchors] + noise)
    return TenantData(
        project=tenant.project,
        entity_names=entity_names,
        entity_types=types,
        entity_counts=counts,
        centres=centres,
        facts=facts,
        vectors=vectors,
    )


def queries(data: TenantData, count: int, *, words: Sequence[str], seed: int) -> list[SynthQuery]:
    """Query texts and vectors drawn from the tenant's live, confident facts."""
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    live = [i for i, f in enumerate(data.facts) if f[7] is None and f[8] >= 0.5]
    out: list[SynthQuery] = []
    for _ in range(count):
        i = rng.choice(live)
        subject, predicate, obj_text, _, _, anchor, *_ = data.facts[i]
        fact_words = f"{data.entity_names[subject]} {predicate} {obj_text}".split()
        picked = [*rng.sample(fact_words, min(2, len(fact_words))), words[rng.randrange(len(words))]]
        if rng.random() < 0.5:
            picked.append(data.entity_names[anchor])
        rng.shuffle(picked)
        text = "what about " + " ".join(picked) + "?"
        noise = nprng.standard_normal(data.vectors.shape[1]).astype(np.float32) / np.sqrt(data.vectors.shape[1])
        vector = _unit(data.vectors[i] + 0.8 * noise)
        out.append(SynthQuery(project=data.project, text=text, vector=vector, values=tuple(float(x) for x in vector)))
    return out


def fact_texts(data: TenantData) -> Iterator[tuple[str, str, str]]:
    """(subject, predicate, object) of each fact, in order."""
    for subject, predicate, obj_text, *_ in data.facts:
        yield data.entity_names[subject], predicate, obj_text


# --- loading -----------------------------------------------------------------------------------------


@dataclass
class LoadReport:
    facts: int
    copy_s: float
    index_s: float

    @property
    def copy_rate(self) -> float:
        return self.facts / self.copy_s if self.copy_s else 0.0


@dataclass(frozen=True)
class SecondaryIndex:
    """An index the load drops and makes again: its definition, and for the index of a partitioned
    table its partitions' own indexes (name, definition), which dropping it drops too; made again
    from its definition alone (`ON ONLY`) it would hold none of them."""

    name: str
    definition: str
    partitions: tuple[tuple[str, str], ...] = ()


def _secondary_indexes(conn: psycopg.Connection[Any], schema: str) -> list[SecondaryIndex]:
    """The schema's indexes that back no constraint and are no partition of a partitioned table's
    index (each with its partitions' indexes: dropping it drops those)."""
    rows = conn.execute(
        """SELECT i.indexname, i.indexdef,
                  ARRAY(SELECT p.relname::text FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhrelid
                        WHERE h.inhparent = ic.oid ORDER BY p.relname),
                  ARRAY(SELECT pg_get_indexdef(p.oid) FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhrelid
                        WHERE h.inhparent = ic.oid ORDER BY p.relname)
           FROM pg_indexes i
           JOIN pg_namespace n ON n.nspname = i.schemaname
           JOIN pg_class ic ON ic.relnamespace = n.oid AND ic.relname = i.indexname
           WHERE i.schemaname = %s
             AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = ic.oid)
             AND NOT EXISTS (SELECT 1 FROM pg_inherits h WHERE h.inhrelid = ic.oid)
           ORDER BY i.indexname""",
        (schema,),
    ).fetchall()
    return [
        SecondaryIndex(str(name), str(definition), tuple(zip(names, definitions, strict=True)))
        for name, definition, names, definitions in rows
    ]


def _make_index(conn: psycopg.Connection[Any], schema: str, index: SecondaryIndex) -> None:
    """`index` made again with its partitions' indexes, each attached to it (definitions from
    pg_indexes, not user input)."""
    conn.execute(sql.SQL(index.definition))
    for name, definition in index.partitions:
        conn.execute(sql.SQL(definition))
        conn.execute(
            sql.SQL("ALTER INDEX {s}.{parent} ATTACH PARTITION {s}.{part}").format(
                s=sql.Identifier(schema), parent=sql.Identifier(index.name), part=sql.Identifier(name)
            )
        )


def load(
    conn: psycopg.Connection[Any], schema: str, tenants: Sequence[TenantData], *, maintenance_work_mem: str = "1GB"
) -> LoadReport:
    """COPY every tenant into memsoda's tables with the secondary indexes dropped, then rebuild
    them (HNSW and GIN included), VACUUM and ANALYZE. `conn` must be in autocommit mode."""
    s = sql.Identifier(schema)
    indexes = _secondary_indexes(conn, schema)
    for index in indexes:
        conn.execute(sql.SQL("DROP INDEX {}.{}").format(s, sql.Identifier(index.name)))
    started = time.perf_counter()
    total = 0
    ((next_entity,),) = conn.execute(sql.SQL("SELECT coalesce(max(id), 0) + 1 FROM {}.entities").format(s)).fetchall()
    ((next_fact,),) = conn.execute(sql.SQL("SELECT coalesce(max(id), 0) + 1 FROM {}.facts").format(s)).fetchall()
    conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS stage_entities "
        "(dataset text, project text, id bigint, name text, type text, fact_count int, embedding vector)"
    )
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = off")
        ((superuser,),) = conn.execute("SELECT current_setting('is_superuser') = 'on'").fetchall()
        if superuser:
            # Skip the per-row foreign-key triggers: the rows are consistent by construction, and
            # the checks' cached plans (made while the tables were empty) cost ~2 ms a row.
            conn.execute("SET LOCAL session_replication_role = replica")
        for data in tenants:
            entity_ids = list(range(next_entity, next_entity + len(data.entity_names)))
            next_entity += len(entity_ids)
            conn.execute("TRUNCATE stage_entities")
            with conn.cursor().copy(
                "COPY stage_entities (dataset, project, id, name, type, fact_count, embedding)"
                " FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["text", "text", "int8", "text", "text", "int4", "vector"])
                for j, name in enumerate(data.entity_names):
                    copy.write_row(
                        (
                            data.dataset,
                            data.project,
                            entity_ids[j],
                            name,
                            data.entity_types[j],
                            data.entity_counts[j],
                            data.centres[j],
                        )
                    )
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.entities (dataset, project, id, name, type, fact_count, embedding) "
                    "OVERRIDING SYSTEM VALUE SELECT dataset, project, id, name, type, fact_count, embedding "
                    "FROM stage_entities"
                ).format(s)
            )
            fact_ids = range(next_fact, next_fact + len(data.facts))
            next_fact += len(data.facts)
            with conn.cursor().copy(
                sql.SQL(
                    "COPY {}.facts (dataset, project, id, subject, predicate, object, object_type, subject_id,"
                    " object_id, anchor_id, valid_at, invalid_at, confidence, embedding) FROM STDIN (FORMAT BINARY)"
                ).format(s)
            ) as copy:
                copy.set_types(
                    [
                        "text",
                        "text",
                        "int8",
                        "text",
                        "text",
                        "text",
                        "text",
                        "int8",
                        "int8",
                        "int8",
                        "timestamptz",
                        "timestamptz",
                        "float4",
                        "vector",
                    ]
                )
                for fid, fact, vector in zip(fact_ids, data.facts, data.vectors, strict=True):
                    subject, predicate, obj_text, obj_idx, _, anchor, valid_at, invalid_at, confidence = fact
                    copy.write_row(
                        (
                            data.dataset,
                            data.project,
                            fid,
                            data.entity_names[subject],
                            predicate,
                            obj_text,
                            "LITERAL" if obj_idx is None else data.entity_types[obj_idx],
                            entity_ids[subject],
                            None if obj_idx is None else entity_ids[obj_idx],
                            entity_ids[anchor],
                            valid_at,
                            invalid_at,
                            confidence,
                            vector,
                        )
                    )
            with conn.cursor().copy(
                sql.SQL(
                    "COPY {}.fact_entities (dataset, project, entity_id, fact_id, roles) FROM STDIN (FORMAT BINARY)"
                ).format(s)
            ) as copy:
                copy.set_types(["text", "text", "int8", "int8", "int2"])
                for fid, fact in zip(fact_ids, data.facts, strict=True):
                    subject, _, _, obj_idx, mention, *_ = fact
                    roles: dict[int, int] = {subject: 1}
                    if obj_idx is not None:
                        roles[obj_idx] = roles.get(obj_idx, 0) | 2
                    if mention is not None:
                        roles[mention] = roles.get(mention, 0) | 4
                    for entity, role in roles.items():
                        copy.write_row((data.dataset, data.project, entity_ids[entity], fid, role))
            conn.execute(
                sql.SQL("INSERT INTO {}.scopes (dataset, project, fact_count) VALUES (%s, %s, %s)").format(s),
                (data.dataset, data.project, len(data.facts)),
            )
            total += len(data.facts)
    copy_s = time.perf_counter() - started
    started = time.perf_counter()
    conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(maintenance_work_mem)))
    for index in indexes:
        _make_index(conn, schema, index)
    for data in tenants:  # what memsoda's writes keep: each lexeme's fact count in the scope
        conn.execute(recount_lexemes(schema, scoped=True), {"dataset": data.dataset, "project": data.project})
    for table in ("entities", "facts"):
        conn.execute(
            sql.SQL("SELECT setval(pg_get_serial_sequence({}, 'id'), (SELECT max(id) FROM {}.{}))").format(
                sql.Literal(f"{schema}.{table}"), s, sql.Identifier(table)
            )
        )
    # VACUUM too: a table fresh from COPY has no hint bits or visibility map yet, so the first reads
    # of every page write it back, and autovacuum would do the same work while queries are timed
    conn.execute(
        sql.SQL("VACUUM (ANALYZE) {}.entities, {}.facts, {}.fact_entities, {}.lexemes, {}.scopes").format(s, s, s, s, s)
    )
    conn.execute("RESET maintenance_work_mem")
    return LoadReport(facts=total, copy_s=copy_s, index_s=time.perf_counter() - started)
