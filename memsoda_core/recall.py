"""Pure parts of recall: statement parameters, row decoding, explanations, fusion into a result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from .fusion import rrf_ranks
from .models import Episode, Fact, RecallResult, ScoredFact, Signal, SignalHit
from .options import RecallOptions
from .render import anchor_entities, group_by_anchor, render
from .sql_recall import HALF_RULE_MAX_LEXEMES, RecallPlan
from .text import keyword_terms, name_spans, normalize_query
from .validation import Scope

FACT_COLUMN_COUNT = 15
_HIT_COLUMN_COUNT = 8


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
    spans = name_spans(normalized)
    params: dict[str, Any] = {
        "dataset": scope.dataset,
        "project": scope.project,
        "at": at,
        "min_confidence": options.min_confidence,
        "spans": spans,
        "span_terms": [" ".join(keyword_terms(span)) for span in spans],
        "terms": keyword_terms(normalized),
        "tsconfig": text_search_config,
        "hub_min_facts": options.hub_min_facts,
        "hub_min_share": options.hub_min_share,
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


def fuse_rows(rows: Sequence[Sequence[Any]], options: RecallOptions) -> list[ScoredFact]:
    """Rows of the recall statement -> the top `facts_in_context` facts by RRF, best first. The rows
    carry each hit's rank in its full signal list (the statement returns only the kept facts)."""
    facts: dict[int, Fact] = {}
    hits: dict[int, list[SignalHit]] = {}
    ranks: dict[int, dict[str, int]] = {}
    for row in rows:
        signal, rank, hop, via, via_named, via_similarity, similarity, matched = row[:_HIT_COLUMN_COUNT]
        fact = decode_fact(row[_HIT_COLUMN_COUNT:])
        facts[fact.id] = fact
        hits.setdefault(fact.id, []).append(
            explain(signal, rank, hop, via, via_named, via_similarity, similarity, matched)
        )
        ranks.setdefault(fact.id, {})[signal] = int(rank)
    fused = rrf_ranks(ranks, k=options.rrf_k, tiebreak={fid: f.valid_at.timestamp() for fid, f in facts.items()})
    order = ("vector", "anchor", "keyword", "recent")
    return [
        ScoredFact(
            fact=facts[entry.fact_id],
            score=round(entry.score, 9),
            hits=tuple(sorted(hits[entry.fact_id], key=lambda h: order.index(h.signal))),
        )
        for entry in fused[: options.facts_in_context]
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
