"""Pure parts of recall: statement parameters, row decoding, explanations, fusion into a result."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from memsoda_core.models import Episode, Fact, RecallResult, ScoredFact, Signal, SignalHit
from memsoda_core.options import RecallOptions
from memsoda_core.recall.fusion import rrf_ranks
from memsoda_core.recall.render import anchor_entities, group_by_anchor, render
from memsoda_core.recall.statements import HALF_RULE_MAX_LEXEMES, RecallPlan
from memsoda_core.store.params import TextArray
from memsoda_core.text import name_spans_with_terms, normalize_query, normalized_terms
from memsoda_core.validation import Scope

FACT_COLUMN_COUNT = 15


def plan_for(query: str | None, has_embedding: bool, options: RecallOptions) -> RecallPlan:
    """Which signals run: recency alone with neither a query nor a vector; keyword + named anchors
    + recency without an embedding (degraded); vector + near anchors for a bare `query_embedding`;
    otherwise vector, anchor and keyword."""
    if query is None and not has_embedding:
        return RecallPlan(vector=False, anchor=False, keyword=False, recent=True)
    return RecallPlan(
        vector=has_embedding,
        anchor=True,
        keyword=query is not None,
        recent=not has_embedding,
        hops=options.anchor_hops,
    )


def statement_params(
    *,
    scope: Scope,
    query: str | None,
    embedding: Sequence[float] | np.ndarray[Any, Any] | None,
    at: datetime,
    options: RecallOptions,
    text_search_config: str,
) -> dict[str, Any]:
    """Every bound value of the recall statement."""
    normalized = normalize_query(query) if query else ""
    spans = name_spans_with_terms(normalized)
    params: dict[str, Any] = {
        "dataset": scope.dataset,
        "project": scope.project,
        "at": at,
        "min_confidence": options.min_confidence,
        "spans": TextArray(spans),
        "span_terms": TextArray(spans.values()),
        "terms": TextArray(normalized_terms(normalized)),
        "tsconfig": text_search_config,
        "hub_min_facts": options.hub_min_facts,
        "hub_min_share": options.hub_min_share,
        "common_min_facts": options.common_term_min_facts,
        "common_share": options.common_term_share,
        "near_k": options.anchor_vector_top_k,
        "near_min": options.anchor_vector_min,
        "vector_limit": options.vector_candidates,
        "anchor_limit": options.anchor_candidates,
        "keyword_limit": options.keyword_candidates,
        "keyword_pool": options.keyword_candidates * 4,
        "half_max_lexemes": HALF_RULE_MAX_LEXEMES,
        "recent_limit": options.facts_in_context if query is None else options.vector_candidates,
        "episodes_k": options.episodes_k,
        "bridge_max_facts": options.bridge_max_facts,
        "anchor_max_facts": options.anchor_max_facts,
        "rrf_k": options.rrf_k,
        "facts_in_context": options.facts_in_context,
    }
    if embedding is not None:
        params["qvec"] = np.asarray(embedding, dtype=np.float32)
    return params


def decode_fact(row: Sequence[Any]) -> Fact:
    """A Fact from the columns of `sql_write.fact_columns`, in order."""
    (
        fid,
        dataset,
        project,
        subject,
        predicate,
        obj,
        object_type,
        anchor,
        anchor_type,
        mentions,
        valid_at,
        invalid_at,
        confidence,
        quote,
        created_at,
    ) = row[:FACT_COLUMN_COUNT]
    return Fact(
        id=int(fid),
        dataset=dataset,
        project=project,
        subject=subject,
        predicate=predicate,
        object=obj,
        object_type=object_type,
        anchor=anchor,
        anchor_type=anchor_type,
        mentions=tuple(mentions or ()),
        valid_at=valid_at,
        invalid_at=invalid_at,
        confidence=round(float(confidence), 6),
        source_quote=quote,
        created_at=created_at,
    )


def explain(
    signal: Signal,
    rank: int,
    hop: int | None,
    via: str | None,
    via_named: bool | None,
    via_similarity: float | None,
    similarity: float | None,
    matched: Sequence[str] | None,
) -> SignalHit:
    """Why a signal picked a fact, in words a person can check."""
    sim = None if similarity is None else round(float(similarity), 4)
    if signal == "vector":
        reason = f"cosine similarity {sim:.3f} to the query"
    elif signal == "anchor":
        if hop == 2:
            reason = f"second hop via {via!r}"
        elif via_named:
            reason = f"touches {via!r}, named in the query"
        else:
            reason = f"touches {via!r}, near the query (similarity {float(via_similarity or 0):.3f})"
    elif signal == "keyword":
        reason = "matched terms: " + ", ".join(matched or ())
    else:
        reason = "most recent live fact"
    return SignalHit(signal=signal, rank=int(rank), reason=reason, similarity=sim)


@dataclass(frozen=True, kw_only=True)
class Kept:
    """A fact fusion kept, before its columns are read: its id, RRF score and signal hits."""

    fact_id: int
    score: float
    hits: tuple[SignalHit, ...]


_SIGNAL_ORDER = ("vector", "anchor", "keyword", "recent")


def _signal_order(hit_row: Sequence[Any]) -> int:
    return _SIGNAL_ORDER.index(hit_row[0])


def fuse_hits(rows: Iterable[Sequence[Any]], options: RecallOptions) -> list[Kept]:
    """Hit rows of the recall statements -> the top `facts_in_context` fact ids by RRF, best first
    (ties: best single rank, then the more recent valid_at, then the larger id)."""
    found: dict[int, list[Sequence[Any]]] = {}
    ranks: dict[int, dict[str, int]] = {}
    recency: dict[int, float] = {}
    for row in rows:
        signal, fact_id, rank, valid_at_us = row[0], row[1], row[2], row[3]
        hits = found.get(fact_id)
        if hits is None:
            found[fact_id] = [row]
            ranks[fact_id] = {signal: rank}
            recency[fact_id] = valid_at_us
        else:
            hits.append(row)
            ranks[fact_id][signal] = rank
    fused = rrf_ranks(ranks, k=options.rrf_k, tiebreak=recency, limit=options.facts_in_context)
    return [
        Kept(
            fact_id=int(entry.fact_id),
            score=round(entry.score, 9),
            hits=tuple(
                explain(signal, rank, *details)  # explained only for the facts kept
                for signal, _, rank, _, *details in sorted(found[entry.fact_id], key=_signal_order)
            ),
        )
        for entry in fused
    ]


def scored_facts(kept: Sequence[Kept], fact_rows: Iterable[Sequence[Any]]) -> list[ScoredFact]:
    """Attach the facts' columns to what fusion kept, in fusion's order. A fact deleted between
    the two reads (a concurrent `forget`) is left out."""
    facts = {fact.id: fact for fact in map(decode_fact, fact_rows)}
    return [
        ScoredFact(fact=facts[entry.fact_id], score=entry.score, hits=entry.hits)
        for entry in kept
        if entry.fact_id in facts
    ]


def decode_episodes(rows: Sequence[Sequence[Any]]) -> list[Episode]:
    return [
        Episode(
            id=int(eid),
            thread_id=thread,
            text=text,
            created_at=created,
            similarity=None if sim is None else round(float(sim), 4),
        )
        for eid, thread, text, created, sim in rows
    ]


def assemble(
    scored: Sequence[ScoredFact],
    *,
    episodes: Sequence[Episode] = (),
    degraded_reason: str | None = None,
    timings_ms: Mapping[str, float] | None = None,
) -> RecallResult:
    """Group, render and package a recall."""
    groups = group_by_anchor(scored)
    entities = anchor_entities(groups)
    return RecallResult(
        context=render(groups, entities, episodes),
        facts=tuple(scored),
        entities=tuple(entities),
        episodes=tuple(episodes),
        degraded=degraded_reason is not None,
        degraded_reason=degraded_reason,
        timings_ms=dict(timings_ms or {}),
    )
