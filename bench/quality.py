"""`python -m bench quality`: recall@8, MRR@8 and nDCG@8 per query kind for each signal alone,
the fusions a user could build, and memsoda's variants, on the hand-labelled memories.

Each memory is loaded twice into fresh scopes of a real store with the real local embedder: once
as memsoda stores it (embedding of "s p o. About: anchor.") and once with the bare triple embedded.
Every query is embedded once; each variant is one statement per query (see `variants.py`).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TextIO

import numpy as np
from psycopg import sql

from bench import extras, metrics, realmem, variants
from bench.common import bench_memory, connect, environment, markdown_table
from bench.embedders import embed_queries
from bench.labelled import KINDS, LabelledMemory, Query, import_record, load
from bench.variants import UNCAPPED, KeywordForm, Variant
from memsoda_core import Memory
from memsoda_core.embedders import Embedder, LocalEmbedder
from memsoda_core.models import FusionChoice
from memsoda_core.options import DEFAULT_OPTIONS, FIRST_PERSON_OPTIONS, GENERAL_OPTIONS, RecallOptions
from memsoda_core.validation import Scope

DATASET = "bench-quality"
WIDE = 1000
"""Anchor list length for the physical-order variants: the reference's anchor query had no limit."""

CONFIGS: dict[str, Variant] = {  # "default" is resolved per scope as `Memory.recall` does (`variants.resolved`)
    "default": Variant(options=DEFAULT_OPTIONS),
    "general": Variant(options=GENERAL_OPTIONS),
    "wide": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.candidates": WIDE})),
    "hop1": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.hops": 1})),
    "hop1_wide": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.hops": 1, "anchor.candidates": WIDE})),
    "hubs_kept": Variant(options=GENERAL_OPTIONS.with_overrides({"entities.hub_min_share": 1.0})),
    "reference": Variant(
        options=GENERAL_OPTIONS.with_overrides(
            {"anchor.hops": 1, "entities.hub_min_share": 1.0, "anchor.candidates": WIDE}
        ),
        keyword=KeywordForm.OR_WITH_HUBS,
    ),
    "kw_half": Variant(options=GENERAL_OPTIONS, keyword=KeywordForm.HALF_TS_RANK),
    "kw_min1": Variant(options=GENERAL_OPTIONS.with_overrides({"keyword.min_terms": 1})),
    "kw_min3": Variant(options=GENERAL_OPTIONS.with_overrides({"keyword.min_terms": 3})),
    "kw_and": Variant(options=GENERAL_OPTIONS, keyword=KeywordForm.AND),
    "kw_or": Variant(options=GENERAL_OPTIONS, keyword=KeywordForm.OR),
    "bridge_off": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.bridge_max_facts": UNCAPPED})),
    "near_075": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.vector_min": 0.75})),
    "near_060": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.vector_min": 0.6})),
    "near_gap06": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.vector_gap": 0.6})),
    "near_gap04": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.vector_gap": 0.4})),
    "near_050": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.vector_min": 0.5})),
    "named_only": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.vector_top_k": 0})),
    "no_validity": Variant(options=GENERAL_OPTIONS, keyword=KeywordForm.OR, validity=False),
    "bridge8": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.bridge_max_facts": 8})),
    "common_05": Variant(
        options=GENERAL_OPTIONS.with_overrides({"keyword.common_term_min_facts": 0, "keyword.common_term_share": 0.05})
    ),
    "names_off": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.name_share": 0.0})),
    "names_09": Variant(options=GENERAL_OPTIONS.with_overrides({"anchor.name_share": 0.9})),
    "first_person": Variant(options=FIRST_PERSON_OPTIONS),
    "first_person_05": Variant(options=FIRST_PERSON_OPTIONS.with_overrides({"anchor.name_share": 0.5})),
    "common_20": Variant(
        options=GENERAL_OPTIONS.with_overrides({"keyword.common_term_min_facts": 0, "keyword.common_term_share": 0.2})
    ),
}

FIRST_PERSON_ROW = (
    "**first-person options (`FIRST_PERSON_OPTIONS`: recency list of 50, keyword needs 1 term, name test at 0.9)**"
)
FIRST_PERSON_05_ROW = "first-person options, name test at the default share 0.5"
ALL = ("vector", "anchor", "keyword")
DEFAULTS = (*ALL, "date")
"""What `Memory.recall` fuses by default: the date list joins when the question names a date."""
CHOSEN = (*DEFAULTS, "recent")
"""... and the recency list when the memory chose the first-person options (the "default" config's
lists hold it only then: `variants.drop_unchosen`)."""
GENERAL_ROW = "full, the general options (`GENERAL_OPTIONS`: the defaults before the memory chose)"


@dataclass(frozen=True, kw_only=True)
class Row:
    """One line of the results table: which run, which lists are fused, and how."""

    label: str
    config: str
    signals: tuple[str, ...]
    physical: bool = False
    """Replace the anchor list by its physical (insertion) order, as the reference's query had."""
    embedding: str = "anchor"
    """Which fact embeddings: "anchor" (memsoda's "s p o. About: anchor."), "bare" (the triple
    alone) or "selective" ("About: anchor" only when the anchor is not the subject)."""


ROWS: tuple[Row, ...] = (
    Row(label="vector only", config="general", signals=("vector",)),
    Row(label="keyword only (plain OR of terms, ts_rank)", config="kw_or", signals=("keyword",)),
    Row(label="keyword only (AND: plainto_tsquery)", config="kw_and", signals=("keyword",)),
    Row(
        label="keyword only (half the terms, by ts_rank: the default before issue 20)",
        config="kw_half",
        signals=("keyword",),
    ),
    Row(label="keyword only (min(ceil(n/2), 2) terms, by IDF: the default)", config="general", signals=("keyword",)),
    Row(label="anchor only (2 hops, by relevance)", config="general", signals=("anchor",)),
    Row(label="anchor only (1 hop, by relevance)", config="hop1", signals=("anchor",)),
    Row(
        label="anchor only as the reference (1 hop, physical order, hubs kept)",
        config="reference",
        signals=("anchor",),
        physical=True,
    ),
    Row(label="vector + keyword RRF (EnsembleRetriever's fusion)", config="kw_or", signals=("vector", "keyword")),
    Row(
        label="vector + keyword RRF, no validity filter (plain EnsembleRetriever)",
        config="no_validity",
        signals=("vector", "keyword"),
    ),
    Row(label="vector + anchor RRF", config="general", signals=("vector", "anchor")),
    Row(label="full: vector + anchor + keyword, no date signal (the defaults before)", config="general", signals=ALL),
    Row(label="**full: vector + anchor + keyword + date (defaults)**", config="default", signals=CHOSEN),
    Row(label=GENERAL_ROW, config="general", signals=DEFAULTS),
    Row(label="defaults + recency list (recent.candidates=50)", config="general", signals=(*DEFAULTS, "recent")),
    Row(
        label="defaults + the vector list's 30 nearest, latest first (bench-only)",
        config="general",
        signals=(*DEFAULTS, "recent_among"),
    ),
    Row(label="defaults, no name test (anchor.name_share=0: the default before)", config="names_off", signals=DEFAULTS),
    Row(label="defaults, name test at share 0.9 (anchor.name_share=0.9)", config="names_09", signals=DEFAULTS),
    Row(label=FIRST_PERSON_ROW, config="first_person", signals=(*DEFAULTS, "recent")),
    Row(label=FIRST_PERSON_05_ROW, config="first_person_05", signals=(*DEFAULTS, "recent")),
    Row(label="full, anchor list in physical order", config="wide", signals=ALL, physical=True),
    Row(label="full, 1 hop", config="hop1", signals=ALL),
    Row(label="full, 1 hop, physical order", config="hop1_wide", signals=ALL, physical=True),
    Row(label="full, hubs kept (entities.hub_min_share=1.0)", config="hubs_kept", signals=ALL),
    Row(
        label="full as the reference (1 hop, physical order, hubs kept)", config="reference", signals=ALL, physical=True
    ),
    Row(label="full, keyword half rule by ts_rank (the default before issue 20)", config="kw_half", signals=ALL),
    Row(label="full, keyword needs 1 term (keyword.min_terms=1)", config="kw_min1", signals=ALL),
    Row(label="full, keyword needs up to 3 terms (keyword.min_terms=3)", config="kw_min3", signals=ALL),
    Row(label="full, keyword AND (plainto_tsquery)", config="kw_and", signals=ALL),
    Row(label="full, keyword plain OR of terms (hub names kept)", config="kw_or", signals=ALL),
    Row(label="full, second-hop bridges capped at 8 facts", config="bridge8", signals=ALL),
    Row(
        label="full, terms in over 5% of the memory's facts left out (no 1,000-fact floor)",
        config="common_05",
        signals=ALL,
    ),
    Row(
        label="full, terms in over 20% of the memory's facts left out (no 1,000-fact floor)",
        config="common_20",
        signals=ALL,
    ),
    Row(label="full, second-hop bridges uncapped", config="bridge_off", signals=ALL),
    Row(label="full, named anchors only (no near entities)", config="named_only", signals=ALL),
    Row(
        label="defaults, near entities at similarity >= 0.75 (the default before issue 27)",
        config="near_075",
        signals=DEFAULTS,
    ),
    Row(label="full, near entities at similarity >= 0.6", config="near_060", signals=ALL),
    Row(label="full, near entities at similarity >= 0.5", config="near_050", signals=ALL),
    Row(
        label="vector only, bare triple embedded (no enrichment)",
        config="general",
        signals=("vector",),
        embedding="bare",
    ),
    Row(
        label="vector only, enrichment only when anchor is not the subject",
        config="general",
        signals=("vector",),
        embedding="selective",
    ),
    Row(label="full, bare triple embedded (no enrichment)", config="general", signals=ALL, embedding="bare"),
    Row(
        label="full, enrichment only when anchor is not the subject",
        config="general",
        signals=ALL,
        embedding="selective",
    ),
)


DEFAULT_ROW = next(row for row in ROWS if row.label.startswith("**full"))

NEAR_075 = "defaults, near entities at similarity >= 0.75 (the default before issue 27)"
NEAR_ROWS: tuple[tuple[str, str], ...] = (
    (NEAR_075, "near_075"),
    ("defaults, near entities by the gap rule at 0.6 of the spread", "near_gap06"),
    ("defaults, near entities by the gap rule at 0.4 of the spread", "near_gap04"),
    ("defaults, named anchors only (no near entities)", "named_only"),
)
"""The near-entity rules compared under every embedder (the default is the gap rule at 0.5)."""

COMPACT_ROWS: tuple[Row, ...] = (
    *(
        row
        for row in ROWS
        if row.embedding == "anchor"
        and row.label
        in (
            "vector only",
            "keyword only (plain OR of terms, ts_rank)",
            "keyword only (min(ceil(n/2), 2) terms, by IDF: the default)",
            "anchor only (2 hops, by relevance)",
            "vector + keyword RRF (EnsembleRetriever's fusion)",
            DEFAULT_ROW.label,
            GENERAL_ROW,
            FIRST_PERSON_ROW,
        )
    ),
    *(Row(label=label, config=config, signals=DEFAULTS) for label, config in NEAR_ROWS),
)
"""`--rows compact`: the baselines, the defaults and the near-entity rules (the run under several
embedders)."""

REALMEM_ROWS: tuple[realmem.RealmemRow, ...] = (
    realmem.RealmemRow(label="vector only", config="general", signals=("vector",)),
    realmem.RealmemRow(label="keyword only (plain OR of terms, ts_rank)", config="kw_or", signals=("keyword",)),
    realmem.RealmemRow(
        label="keyword only (half the terms, by ts_rank: the default before issue 20)",
        config="kw_half",
        signals=("keyword",),
    ),
    realmem.RealmemRow(
        label="keyword only (min(ceil(n/2), 2) terms, by IDF: the default)", config="general", signals=("keyword",)
    ),
    realmem.RealmemRow(label="anchor only", config="general", signals=("anchor",)),
    realmem.RealmemRow(
        label="vector + keyword RRF (EnsembleRetriever's fusion)", config="kw_or", signals=("vector", "keyword")
    ),
    realmem.RealmemRow(
        label="vector + keyword RRF, memsoda's keyword signal", config="general", signals=("vector", "keyword")
    ),
    realmem.RealmemRow(label="vector + anchor RRF", config="general", signals=("vector", "anchor")),
    realmem.RealmemRow(
        label="full: vector + anchor + keyword, no date signal (the defaults before)", config="general", signals=ALL
    ),
    realmem.RealmemRow(label="**full: vector + anchor + keyword + date (defaults)**", config="default", signals=CHOSEN),
    realmem.RealmemRow(label=GENERAL_ROW, config="general", signals=DEFAULTS),
    realmem.RealmemRow(
        label="defaults + recency list (recent.candidates=50)", config="general", signals=(*DEFAULTS, "recent")
    ),
    realmem.RealmemRow(
        label="defaults + recency list + conversation (last 2 user turns)",
        config="general",
        signals=(*DEFAULTS, "recent", "conversation"),
    ),
    realmem.RealmemRow(
        label="vector + keyword + recency list (no anchor)", config="general", signals=("vector", "keyword", "recent")
    ),
    realmem.RealmemRow(
        label="defaults + recency list, keyword needs 1 term", config="kw_min1", signals=(*DEFAULTS, "recent")
    ),
    realmem.RealmemRow(
        label="defaults + the vector list's 30 nearest, latest first (bench-only)",
        config="general",
        signals=(*DEFAULTS, "recent_among"),
    ),
    realmem.RealmemRow(
        label="defaults, no name test (anchor.name_share=0: the default before)", config="names_off", signals=DEFAULTS
    ),
    realmem.RealmemRow(
        label="defaults, name test at share 0.9 (anchor.name_share=0.9)", config="names_09", signals=DEFAULTS
    ),
    realmem.RealmemRow(label=FIRST_PERSON_ROW, config="first_person", signals=(*DEFAULTS, "recent")),
    realmem.RealmemRow(label=FIRST_PERSON_05_ROW, config="first_person_05", signals=(*DEFAULTS, "recent")),
    realmem.RealmemRow(
        label="first-person options + conversation (last 2 user turns)",
        config="first_person",
        signals=(*DEFAULTS, "recent", "conversation"),
    ),
    realmem.RealmemRow(
        label="defaults + conversation: last 2 user turns as a list of their own (`conversation=`)",
        config="general",
        signals=(*DEFAULTS, "conversation"),
    ),
    realmem.RealmemRow(
        label="defaults + conversation: last 4 user turns as a list of their own",
        config="general",
        signals=(*DEFAULTS, "conversation4"),
    ),
    realmem.RealmemRow(
        label="defaults, query vector blended with the last 2 user turns (one vector list)",
        config="general",
        signals=("blend", "anchor", "keyword", "date"),
    ),
    realmem.RealmemRow(
        label="full, keyword half rule by ts_rank (the default before issue 20)", config="kw_half", signals=ALL
    ),
    realmem.RealmemRow(label="full, keyword needs 1 term (keyword.min_terms=1)", config="kw_min1", signals=ALL),
    realmem.RealmemRow(label="full, keyword needs up to 3 terms (keyword.min_terms=3)", config="kw_min3", signals=ALL),
    realmem.RealmemRow(label="full, 1 hop", config="hop1", signals=ALL),
    realmem.RealmemRow(label="full, named anchors only (no near entities)", config="named_only", signals=ALL),
    *(realmem.RealmemRow(label=label, config=config, signals=DEFAULTS) for label, config in NEAR_ROWS),
)
"""The realmem replay's rows: the baselines and the variants that bear on first-person memories."""


@dataclass
class LoadedScope:
    scope: Scope
    keys: dict[int, str]
    """fact id -> label key"""
    recency: dict[int, float]
    """fact id -> valid_at timestamp (RRF's tie-break, as in the core)"""


@dataclass
class MemoryResult:
    name: str
    facts: int
    entities: int
    queries: Sequence[Query]
    scores: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """row label -> metric@group -> per-query values"""
    details: list[dict[str, Any]] = field(default_factory=list)
    agreement: tuple[int, int] = (0, 0)
    lint: list[str] = field(default_factory=list)
    fusion: FusionChoice | None = None
    """The fusion the memory chose for its defaults (`recall.adaptive`)."""


def load_scope(memory: Memory, labelled: LabelledMemory, project: str, *, embedding: str) -> LoadedScope:
    """Write the facts with `Memory.add_facts` (batches of 500); then, for the "bare" and
    "selective" embeddings, re-embed the facts whose text differs from memsoda's."""
    scope = Scope(dataset=DATASET, project=project)
    keys: dict[int, str] = {}
    records = list(labelled.facts)
    for start in range(0, len(records), 500):
        batch = records[start : start + 500]
        ids = memory.add_facts([import_record(f) for f in batch], dataset=scope.dataset, project=scope.project)
        keys.update(zip(ids, (str(f["id"]) for f in batch), strict=True))
    schema = sql.Identifier(memory.info.schema)
    with connect(memory.dsn) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT f.id, f.subject, f.predicate, f.object, NULLIF(f.valid_at, '-infinity'), a.name "
                "FROM {s}.facts f "
                "JOIN {s}.entities a ON a.dataset = f.dataset AND a.project = f.project AND a.id = f.anchor_id "
                "WHERE f.dataset = %s AND f.project = %s ORDER BY f.id"
            ).format(s=schema),
            (scope.dataset, scope.project),
        ).fetchall()
        redo = [row for row in rows if embedding == "bare" or (embedding == "selective" and row[5] == row[1])]
        if redo:
            vectors = memory.embedder.embed_documents([f"{s} {p} {o}" for _, s, p, o, _, _ in redo])
            with conn.cursor() as cursor:
                cursor.executemany(
                    sql.SQL(
                        "UPDATE {}.facts SET embedding = %s WHERE dataset = %s AND project = %s AND id = %s"
                    ).format(schema),
                    [
                        (np.asarray(v, dtype=np.float32), scope.dataset, scope.project, row[0])
                        for v, row in zip(vectors, redo, strict=True)
                    ],
                )
    recency = {int(r[0]): r[4].timestamp() if r[4] else -math.inf for r in rows}  # no start: least recent
    return LoadedScope(scope=scope, keys=keys, recency=recency)


def _ranked(row: Row, lists: dict[str, list[int]], options: RecallOptions, loaded: LoadedScope) -> list[str]:
    chosen = dict(lists)
    if row.physical:
        chosen["anchor"] = variants.physical_order(lists.get("anchor", []), DEFAULT_OPTIONS.anchor.candidates)
    if len(row.signals) == 1:
        ids = chosen.get(row.signals[0], [])[: metrics.K]
    else:
        ids = variants.fuse(chosen, row.signals, k=options.rrf_k, recency=loaded.recency, top=metrics.K)
    return [loaded.keys[i] for i in ids]


def run_memory(memory: Memory, labelled: LabelledMemory, *, rows: Sequence[Row] = ROWS) -> MemoryResult:
    """Load, run every config over every query, score every row."""
    suffix = f"{labelled.name}-{int(time.time() * 1000)}"
    scopes = {
        mode: load_scope(memory, labelled, f"{suffix}-{mode}", embedding=mode)
        for mode in sorted({"anchor", *(row.embedding for row in rows)})
    }
    texts = [q.text for q in labelled.queries]
    vectors = embed_queries(memory.embedder, texts)
    at = datetime.now(UTC)
    tsconfig = memory.info.text_search_config
    needed = {(row.config, row.embedding) for row in rows} | {("default", "anchor")}
    runs: dict[tuple[str, str], list[dict[str, list[int]]]] = {}
    resolved: dict[str, RecallOptions] = {}
    chosen: FusionChoice | None = None
    with connect(memory.dsn) as conn:
        for config, mode in sorted(needed):
            variant = CONFIGS[config]
            if config == "default":  # what the memory leaves to itself, chosen as Memory.recall chooses it
                options, fusion = variants.resolved(conn, memory.info.schema, scopes[mode].scope, variant.options)
                variant = replace(variant, options=options)
                resolved[mode] = options
                if mode == "anchor":
                    chosen = fusion
            statement = variants.statement(memory.info.schema, variant)
            out = []
            for text, vector in zip(texts, vectors, strict=True):
                bound = variants.params(
                    scope=scopes[mode].scope,
                    query=text,
                    embedding=vector,
                    at=at,
                    options=variant.options,
                    tsconfig=tsconfig,
                )
                out.append(variants.lists_from_rows(conn.execute(statement, bound).fetchall()))
            runs[(config, mode)] = out
        for mode in sorted({mode for _, mode in needed}):
            for index, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
                found, _ = extras.lists(
                    conn,
                    memory.info.schema,
                    scope=scopes[mode].scope,
                    query=text,
                    embedding=vector,
                    at=at,
                    options=DEFAULT_OPTIONS,
                    tsconfig=tsconfig,
                    conversation={},
                )
                for config, run_mode in needed:
                    if run_mode == mode:
                        runs[(config, mode)][index].update(found)
                        runs[(config, mode)][index]["recent_among"] = variants.recent_among(
                            runs[(config, mode)][index], scopes[mode].recency
                        )
                        if config == "default":
                            runs[(config, mode)][index] = variants.drop_unchosen(
                                runs[(config, mode)][index], resolved[mode]
                            )
        entities = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.entities WHERE dataset = %s AND project = %s").format(
                sql.Identifier(memory.info.schema)
            ),
            (scopes["anchor"].scope.dataset, scopes["anchor"].scope.project),
        ).fetchone()
    result = MemoryResult(
        name=labelled.name,
        facts=len(labelled.facts),
        entities=int(entities[0]) if entities else 0,
        queries=labelled.queries,
        fusion=chosen,
    )
    # The default row must be exactly what Memory.recall returns.
    loaded = scopes["anchor"]
    agree = 0
    for index, (query, vector) in enumerate(zip(labelled.queries, vectors, strict=True)):
        recalled = memory.recall(
            query.text, dataset=loaded.scope.dataset, project=loaded.scope.project, query_embedding=vector
        )
        mine = _ranked(DEFAULT_ROW, runs[("default", "anchor")][index], DEFAULT_OPTIONS, loaded)
        agree += [loaded.keys[s.fact.id] for s in recalled.facts] == mine
        if query.kind == "paraphrase":
            keyword = {loaded.keys[i] for i in runs[("default", "anchor")][index].get("keyword", [])}
            if keyword & set(query.gold):
                result.lint.append(f"{query.id} {query.text!r} shares a search term with its gold fact")
    result.agreement = (agree, len(labelled.queries))
    for row in rows:
        scope = scopes[row.embedding]
        per: dict[str, list[float]] = {}
        for index, query in enumerate(labelled.queries):
            ranked = _ranked(row, runs[(row.config, row.embedding)][index], CONFIGS[row.config].options, scope)
            values = {
                "recall": metrics.recall_at(ranked, query.gold),
                "mrr": metrics.mrr_at(ranked, query.gold),
                "ndcg": metrics.ndcg_at(ranked, query.gold),
            }
            for group in (query.group, "all"):
                for name, value in values.items():
                    per.setdefault(f"{name}@{group}", []).append(value)
            if query.stale:
                per.setdefault("stale@invalidated", []).append(metrics.stale_at(ranked, query.stale))
            result.details.append(
                {
                    "memory": labelled.name,
                    "row": row.label,
                    "query": query.id,
                    "kind": query.group,
                    "text": query.text,
                    "gold": list(query.gold),
                    "top8": ranked,
                    **values,
                }
            )
        result.scores[row.label] = per
    return result


def fusion_note(fusion: FusionChoice | None) -> str:
    """The fusion the memory chose for the default row, in a sentence."""
    if fusion is None:
        return ""
    return f"The memory chose the {fusion.preset.replace('_', '-')} options: {fusion.reason}."


GROUPS = ("paraphrase", "exact", "bridge-1", "bridge-2", "invalidated", "all")


def _mean(values: Sequence[float] | None) -> float | None:
    return statistics.fmean(values) if values else None


def tables(result: MemoryResult) -> str:
    """Per row: recall@8 / MRR@8 / nDCG@8 in each query group, and how often an invalidated
    answer reached the top 8."""
    counts = {g: sum(1 for q in result.queries if q.group == g) for g in GROUPS}
    counts["all"] = len(result.queries)
    header = ["variant", *[f"{g} ({counts[g]})" for g in GROUPS if counts[g]], "stale in top 8"]
    body = []
    for label, per in result.scores.items():
        cells: list[Any] = [label]
        for group in GROUPS:
            if not counts[group]:
                continue
            r, m, n = (_mean(per.get(f"{name}@{group}")) for name in ("recall", "mrr", "ndcg"))
            cells.append(f"{r:.2f} / {m:.2f} / {n:.2f}")
        stale = _mean(per.get("stale@invalidated"))
        cells.append("-" if stale is None else f"{stale:.2f}")
        body.append(cells)
    return markdown_table(header, body)


COMPACT_REALMEM_ROWS: tuple[realmem.RealmemRow, ...] = tuple(
    row
    for row in REALMEM_ROWS
    if row.label
    in (
        "vector only",
        "keyword only (plain OR of terms, ts_rank)",
        "keyword only (min(ceil(n/2), 2) terms, by IDF: the default)",
        "anchor only",
        "vector + keyword RRF (EnsembleRetriever's fusion)",
        "vector + keyword RRF, memsoda's keyword signal",
        "**full: vector + anchor + keyword + date (defaults)**",
        GENERAL_ROW,
        FIRST_PERSON_ROW,
        *(label for label, _ in NEAR_ROWS),
    )
)

SUMMARY_ROWS = (
    ("vector", "vector only"),
    ("keyword (OR)", "keyword only (plain OR of terms, ts_rank)"),
    ("vector+keyword RRF", "vector + keyword RRF (EnsembleRetriever's fusion)"),
    ("defaults (gap rule)", DEFAULT_ROW.label),
    ("defaults, near at cosine 0.75 (before)", NEAR_075),
    ("defaults, gap 0.6", NEAR_ROWS[1][0]),
    ("defaults, gap 0.4", NEAR_ROWS[2][0]),
    ("defaults, no near entities", NEAR_ROWS[3][0]),
)
"""The columns of the summary over several embedders: recall@8 over all queries of a set."""


def summary(recalls: dict[tuple[str, str], dict[str, float]]) -> str:
    """(embedder, memory) -> row label -> recall@8 over all its queries, as one table."""
    header = ["embedder", "memory", *(name for name, _ in SUMMARY_ROWS)]
    body = [
        [model, memory, *(f"{per[label]:.3f}" if label in per else "-" for _, label in SUMMARY_ROWS)]
        for (model, memory), per in recalls.items()
    ]
    return markdown_table(header, body)


def run(
    *,
    max_queries: int | None = None,
    details: TextIO | None = None,
    embedder: Embedder | None = None,
    embedders: Sequence[Embedder] = (),
    memories: Sequence[str] = ("persona", "chat"),
    max_personas: int | None = None,
    compact: bool = False,
) -> str:
    """The whole quality benchmark under each embedder (`embedder`, or each of `embedders`; the
    local model by default); with `compact`, only the baselines, the defaults and the near-entity
    rules (`COMPACT_ROWS`), and a summary across embedders at the end. Returns markdown."""
    models = list(embedders) or [embedder or LocalEmbedder()]
    out: list[str] = []
    recalls: dict[tuple[str, str], dict[str, float]] = {}
    for model in models:
        with bench_memory(model) as memory:
            out.append(f"## embedder {model.model} ({model.dimensions}-d)\n")
            out.append(f"Run: {environment(memory.dsn)}; embedder {model.model} ({model.dimensions}-d).\n")
            for name in memories:
                if name == "realmem":
                    per_row: dict[str, float] = {}
                    out.append(
                        realmem.run(
                            memory,
                            COMPACT_REALMEM_ROWS if compact else REALMEM_ROWS,
                            CONFIGS,
                            max_queries=max_queries,
                            max_personas=max_personas,
                            details=details,
                            recalls=per_row,
                        )
                    )
                    recalls[(model.model, name)] = per_row
                    continue
                labelled = load(name, max_queries=max_queries)
                started = time.perf_counter()
                result = run_memory(memory, labelled, rows=COMPACT_ROWS if compact else ROWS)
                seconds = time.perf_counter() - started
                agree, total = result.agreement
                recalls[(model.model, name)] = {
                    label: statistics.fmean(per["recall@all"]) for label, per in result.scores.items()
                }
                out.append(
                    f"### {name}: {result.facts} facts, {result.entities} entities, {len(result.queries)} queries\n\n"
                    "Cells: recall@8 / MRR@8 / nDCG@8 (mean over the group's queries). "
                    f"Default row identical to `Memory.recall` on {agree}/{total} queries; {seconds:.1f} s. "
                    f"{fusion_note(result.fusion)}\n"
                )
                out.append(tables(result))
                if result.lint:
                    out.append("\nLabel lint (paraphrase queries sharing a term with their gold fact):\n")
                    out += [f"- {line}" for line in result.lint]
                out.append("")
                if details is not None:
                    for record in result.details:
                        details.write(json.dumps({"embedder": model.model, **record}) + "\n")
    if len(models) > 1 or compact:
        out += ["## recall@8 over all queries, per embedder and memory\n", summary(recalls), ""]
    return "\n".join(out) + "\n"


__all__ = [
    "COMPACT_REALMEM_ROWS",
    "COMPACT_ROWS",
    "CONFIGS",
    "KINDS",
    "REALMEM_ROWS",
    "ROWS",
    "run",
    "run_memory",
    "summary",
    "tables",
]
